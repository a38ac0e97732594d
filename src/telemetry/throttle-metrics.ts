import { perMeterProvider } from "./meter-cache.ts";
import { Metric } from "./names.ts";

/** The operations the worker, publisher and relay count when Service Bus answers them ServerBusy. */
export type ThrottledOperation = "send" | "schedule" | "settle" | "renew_lock" | "receive";

const counter = perMeterProvider((meter) =>
  meter.createCounter(Metric.throttled, {
    description:
      "Service Bus operations answered ServerBusy (throttled), by operation; each is retried within its deadline.",
    unit: "{operation}",
  }),
);

/**
 * Counts one operation Service Bus throttled (ServerBusy, the SDK's `ServiceBusy`), each try the process saw,
 * whether a retry then got it through or not: Azure's ThrottledRequests seen from this instance, by operation.
 */
export function recordThrottled(operation: ThrottledOperation, entity: string): void {
  counter().add(1, { "sbinbox.servicebus.operation": operation, "messaging.destination.name": entity });
}
