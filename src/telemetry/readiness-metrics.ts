import { metrics, type MeterProvider, type ObservableResult } from "@opentelemetry/api";
import { METER_NAME, Metric } from "./names.ts";

/** Whether the process is ready, as /readyz decides it. */
export type ReadinessSource = () => Promise<boolean>;

const sources = new Set<ReadinessSource>();
let provider: MeterProvider | undefined;

// Created on first use and again when the global provider changes, as in metrics.ts.
function register(): void {
  const current = metrics.getMeterProvider();
  if (provider === current) return;
  provider = current;
  current
    .getMeter(METER_NAME)
    .createObservableGauge(Metric.ready, {
      description:
        "1 while this instance's /readyz answers 200 (receiver attached, database answering), 0 otherwise.",
      unit: "1",
    })
    .addCallback(async (result: ObservableResult) => {
      await Promise.all(
        [...sources].map(async (read) => {
          let ready = false;
          try {
            ready = await read();
          } catch {
            // A readiness check that throws is a 503 on /readyz too.
          }
          result.observe(ready ? 1 : 0);
        }),
      );
    });
}

export const readinessMetrics = {
  /**
   * Reports `read` at each collection, per instance (the exporter tags cloud_RoleInstance), so an alert can tell
   * "not ready on every instance" from one instance restarting. Returns a function that stops reporting.
   */
  observe(read: ReadinessSource): () => void {
    register();
    sources.add(read);
    return () => void sources.delete(read);
  },
};
