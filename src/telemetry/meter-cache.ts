import { metrics, type Meter, type MeterProvider } from "@opentelemetry/api";
import { METER_NAME } from "./names.ts";

/**
 * Instruments made from the global meter provider on first use, and again whenever it changes: the metrics API has
 * no proxy, so an instrument taken before the SDK registered its provider would stay a no-op forever, and a
 * provider registered anew (a test's, a restarted SDK) needs instruments of its own.
 */
export function perMeterProvider<T>(create: (meter: Meter) => T): () => T {
  let current: { provider: MeterProvider; instruments: T } | undefined;
  return () => {
    const provider = metrics.getMeterProvider();
    if (current?.provider !== provider)
      current = { provider, instruments: create(provider.getMeter(METER_NAME)) };
    return current.instruments;
  };
}
