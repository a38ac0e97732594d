import { metrics, type Counter, type MeterProvider } from "@opentelemetry/api";
import { METER_NAME, Metric } from "./names.ts";

let current: { provider: MeterProvider; counter: Counter } | undefined;

/** Counts each stale lock renewal the settlement guard could not stop (the SDK's internal field is missing). */
export function recordRenewalStopMissing(): void {
  const provider = metrics.getMeterProvider();
  if (current?.provider !== provider) {
    const counter = provider.getMeter(METER_NAME).createCounter(Metric.renewalStopMissing, {
      description:
        "Lock renewals of messages whose link is gone that could not be stopped: the SDK's internal lock renewer is missing, so the redelivery waits for the renewal's end.",
      unit: "{message}",
    });
    current = { provider, counter };
  }
  current.counter.add(1);
}
