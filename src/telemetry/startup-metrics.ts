import { Attr, Metric } from "./names.ts";
import { observedGauge } from "./observed-gauge.ts";

/** A start-up step still waiting: how long so far, and its current state word (waiting, unreachable, refused). */
export type StartupWaitSource = () => { waitedMs: number; state: string };

/** Whether the process is ready, as /readyz decides it. */
export type ReadinessSource = () => Promise<boolean>;

const ready = observedGauge(Metric.ready, {
  description:
    "1 while this instance's /readyz answers 200 (receiver attached, database answering), 0 otherwise.",
  unit: "1",
});

const wait = observedGauge(Metric.startupWait, {
  description:
    "Time a start-up step (database, serviceBus) has waited so far for its dependency; reported only while it waits.",
  unit: "s",
});

export const startupMetrics = {
  /**
   * Reports the step's wait from `read` at each collection until the returned function is called. An unreachable
   * dependency is waited for without limit (a namespace typo, ENOTFOUND, looks like an outage), so this gauge,
   * rising, is what shows an endless wait to an alert; /healthz stays 200 all along.
   */
  observeWait(step: string, read: StartupWaitSource): () => void {
    return wait.observe(() => {
      const { waitedMs, state } = read();
      return {
        value: waitedMs / 1000,
        attributes: { [Attr.startupStep]: step, [Attr.startupState]: state },
      };
    });
  },
  /**
   * Reports `read` (what /readyz answers) at each collection, per instance (the exporter tags cloud_RoleInstance),
   * so an alert can tell "not ready on every instance" from one instance restarting. Returns a function that stops
   * reporting.
   */
  observeReadiness(read: ReadinessSource): () => void {
    // A readiness check that throws is a 503 on /readyz too.
    return ready.observe(async () => ({ value: (await read().catch(() => false)) ? 1 : 0, attributes: {} }));
  },
};
