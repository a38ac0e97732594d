import { Attr, Metric } from "./names.ts";
import { observedGauge } from "./observed-gauge.ts";

/** A start-up step still waiting: how long so far, and its current state word (waiting, unreachable, refused). */
export type StartupWaitSource = () => { waitedMs: number; state: string };

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
};
