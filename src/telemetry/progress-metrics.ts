import { metrics, type MeterProvider, type ObservableResult } from "@opentelemetry/api";
import { Attr, METER_NAME, Metric, destinationAttributes } from "./names.ts";

/** How long the worker's connection has been quiet, and whether that counts as silent (ok, silent). */
export type SilenceSource = () => { silenceMs: number; state: string };

const sources = new Map<SilenceSource, string>();
let provider: MeterProvider | undefined;

// Created on first use and again when the global provider changes, as in metrics.ts.
function register(): void {
  const current = metrics.getMeterProvider();
  if (provider === current) return;
  provider = current;
  current
    .getMeter(METER_NAME)
    .createObservableGauge(Metric.serviceBusSilence, {
      description:
        "Time since the broker was last heard from on the worker's connection (a message, a settlement's answer, a probe's); state silent when readiness says so.",
      unit: "s",
    })
    .addCallback((result: ObservableResult) => {
      for (const [read, queue] of sources) {
        const { silenceMs, state } = read();
        result.observe(silenceMs / 1000, { ...destinationAttributes(queue), [Attr.serviceBusState]: state });
      }
    });
}

export const progressMetrics = {
  /** Reports the worker's silence from `read` at each collection until the returned function is called. */
  observe(queue: string, read: SilenceSource): () => void {
    register();
    sources.set(read, queue);
    return () => void sources.delete(read);
  },
};
