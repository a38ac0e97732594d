import { metrics, type MeterProvider, type ObservableResult } from "@opentelemetry/api";
import { Attr, METER_NAME, Metric } from "./names.ts";

/** A start-up step still waiting: how long so far, and its current state word (waiting, unreachable, refused). */
export type StartupWaitSource = () => { waitedMs: number; state: string };

const sources = new Map<StartupWaitSource, string>();
let provider: MeterProvider | undefined;

// Created on first use and again when the global provider changes, as in metrics.ts.
function register(): void {
  const current = metrics.getMeterProvider();
  if (provider === current) return;
  provider = current;
  current
    .getMeter(METER_NAME)
    .createObservableGauge(Metric.startupWait, {
      description:
        "Time a start-up step (database, serviceBus) has waited so far for its dependency; reported only while it waits.",
      unit: "s",
    })
    .addCallback((result: ObservableResult) => {
      for (const [read, step] of sources) {
        const { waitedMs, state } = read();
        result.observe(waitedMs / 1000, { [Attr.startupStep]: step, [Attr.startupState]: state });
      }
    });
}

export const startupMetrics = {
  /**
   * Reports the step's wait from `read` at each collection until the returned function is called. An unreachable
   * dependency is waited for without limit (a namespace typo, ENOTFOUND, looks like an outage), so this gauge,
   * rising, is what shows an endless wait to an alert; /healthz stays 200 all along.
   */
  observeWait(step: string, read: StartupWaitSource): () => void {
    register();
    sources.set(read, step);
    return () => void sources.delete(read);
  },
};
