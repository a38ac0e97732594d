import { perMeterProvider } from "./meter-cache.ts";
import { Metric } from "./names.ts";

const counter = perMeterProvider((meter) =>
  meter.createCounter(Metric.renewalStopMissing, {
    description:
      "Lock renewals of messages whose link is gone that could not be stopped: the SDK's internal lock renewer is missing, so the redelivery waits for the renewal's end.",
    unit: "{message}",
  }),
);

/** Counts each stale lock renewal the settlement guard could not stop (the SDK's internal field is missing). */
export function recordRenewalStopMissing(): void {
  counter().add(1);
}
