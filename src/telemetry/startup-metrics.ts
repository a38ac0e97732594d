import { metrics, type MeterProvider, type ObservableResult } from "@opentelemetry/api";
import { Attr, METER_NAME, Metric } from "./names.ts";

/** A start-up step still waiting: how long so far, and its current state word (waiting, unreachable, refused). */
export type StartupWaitSource = () => { waitedMs: number; state: string };

/** Whether the process is ready, as /readyz decides it. */
export type ReadinessSource = () => Promise<boolean>;

const sources = new Map<StartupWaitSource, string>();
const readiness = new Set<ReadinessSource>();
let provider: MeterProvider | undefined;

// Created on first use and again when the global provider changes, as in metrics.ts.
function register(): void {
  const current = metrics.getMeterProvider();
  if (provider === current) return;
  provider = current;
  const meter = current.getMeter(METER_NAME);
  meter
    .createObservableGauge(Metric.ready, {
      description:
        "1 while this instance's /readyz answers 200 (receiver attached, database answering), 0 otherwise.",
      unit: "1",
    })
    .addCallback(async (result: ObservableResult) => {
      await Promise.all(
        [...readiness].map(async (read) => {
          // A readiness check that throws is a 503 on /readyz too.
          result.observe((await read().catch(() => false)) ? 1 : 0);
        }),
      );
    });
  meter
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
  /**
   * Reports `read` (what /readyz answers) at each collection, per instance (the exporter tags cloud_RoleInstance),
   * so an alert can tell "not ready on every instance" from one instance restarting. Returns a function that stops
   * reporting.
   */
  observeReadiness(read: ReadinessSource): () => void {
    register();
    readiness.add(read);
    return () => void readiness.delete(read);
  },
};
