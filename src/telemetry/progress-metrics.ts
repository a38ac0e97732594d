import { Attr, Metric, destinationAttributes } from "./names.ts";
import { observedGauge } from "./observed-gauge.ts";

const silence = observedGauge(Metric.serviceBusSilence, {
  description:
    "Time since the broker was last heard from on the worker's connection (a message, a settlement's answer, a probe's); state silent when readiness says so.",
  unit: "s",
});

export const progressMetrics = {
  /** Reports the worker's silence (and its state word: ok, silent) from `read` until the returned function is called. */
  observe(queue: string, read: () => { silenceMs: number; state: string }): () => void {
    return silence.observe(() => {
      const { silenceMs, state } = read();
      return {
        value: silenceMs / 1000,
        attributes: { ...destinationAttributes(queue), [Attr.serviceBusState]: state },
      };
    });
  },
};
