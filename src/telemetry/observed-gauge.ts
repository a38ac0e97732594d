import type { Attributes, ObservableResult } from "@opentelemetry/api";
import { perMeterProvider } from "./meter-cache.ts";

/** One reading of a gauge source: its value and the attributes it is reported with (a promise of them, for a
 * source that must ask, such as readiness). */
export type GaugeReading = () =>
  { value: number; attributes: Attributes } | Promise<{ value: number; attributes: Attributes }>;

/**
 * An observable gauge fed by sources that come and go (a start-up step while it waits, a running worker), made
 * per meter provider (`perMeterProvider`) when a source first comes.
 */
export function observedGauge(
  name: string,
  options: { description: string; unit: string },
): { observe(read: GaugeReading): () => void } {
  const sources = new Set<GaugeReading>();
  const register = perMeterProvider((meter) =>
    meter.createObservableGauge(name, options).addCallback(async (result: ObservableResult) => {
      await Promise.all(
        [...sources].map(async (read) => {
          const { value, attributes } = await read();
          result.observe(value, attributes);
        }),
      );
    }),
  );
  return {
    observe(read) {
      register();
      sources.add(read);
      return () => void sources.delete(read);
    },
  };
}
