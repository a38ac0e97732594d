import { metrics, type Attributes, type MeterProvider, type ObservableResult } from "@opentelemetry/api";
import { METER_NAME } from "./names.ts";

/** One reading of a gauge source: its value and the attributes it is reported with (a promise of them, for a
 * source that must ask, such as readiness). */
export type GaugeReading = () =>
  { value: number; attributes: Attributes } | Promise<{ value: number; attributes: Attributes }>;

/**
 * An observable gauge fed by sources that come and go (a start-up step while it waits, a running worker). The
 * gauge is created on first use and again when the global provider changes, as in metrics.ts: the metrics API has
 * no proxy, so one created before the SDK registered its provider would stay a no-op.
 */
export function observedGauge(
  name: string,
  options: { description: string; unit: string },
): { observe(read: GaugeReading): () => void } {
  const sources = new Set<GaugeReading>();
  let provider: MeterProvider | undefined;
  const register = (): void => {
    const current = metrics.getMeterProvider();
    if (provider === current) return;
    provider = current;
    current
      .getMeter(METER_NAME)
      .createObservableGauge(name, options)
      .addCallback(async (result: ObservableResult) => {
        await Promise.all(
          [...sources].map(async (read) => {
            const { value, attributes } = await read();
            result.observe(value, attributes);
          }),
        );
      });
  };
  return {
    observe(read) {
      register();
      sources.add(read);
      return () => void sources.delete(read);
    },
  };
}
