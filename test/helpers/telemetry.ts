import { context, metrics, propagation, trace, type Attributes } from "@opentelemetry/api";
import {
  AggregationTemporality,
  DataPointType,
  MetricReader,
  type MetricData,
  type ResourceMetrics,
} from "@opentelemetry/sdk-metrics";
import {
  AlwaysOnSampler,
  InMemorySpanExporter,
  ParentBasedSampler,
  SimpleSpanProcessor,
  type ReadableSpan,
  type Sampler,
} from "@opentelemetry/sdk-trace";
import { registerProviders } from "../../src/telemetry/providers.ts";

/** A reader that reports what was recorded since its last collection, so each test sees only its own counts. */
class DeltaReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.DELTA });
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

export interface TelemetryCapture {
  /** Spans ended since the last reset, in the order they ended. */
  spans(): ReadableSpan[];
  spansNamed(name: string): ReadableSpan[];
  /** Forgets the spans and the metrics recorded so far. */
  reset(): Promise<void>;
  /** Collects every instrument's data recorded since the last collection or reset. */
  collect(): Promise<MetricData[]>;
  stop(): Promise<void>;
}

/**
 * Registers the providers the worker registers (src/telemetry/providers.ts: context manager, W3C propagators,
 * tracer and meter providers; the default resource, undetected, so each span is in the exporter as it ends), with
 * processors and a reader that keep spans and metrics in memory, as the process-wide globals. Only one may be
 * installed at a time.
 */
export function installTelemetryCapture(options: { sampler?: Sampler } = {}): TelemetryCapture {
  disableGlobals();
  const exporter = new InMemorySpanExporter();
  const reader = new DeltaReader();
  const sdk = registerProviders({
    // The SDK's default, as startTelemetry's createSampler gives for no OTEL_TRACES_SAMPLER.
    sampler: options.sampler ?? new ParentBasedSampler({ root: new AlwaysOnSampler() }),
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
    metricReaders: [reader],
    detectResources: false,
  });
  return {
    spans: () => exporter.getFinishedSpans(),
    spansNamed: (name) => exporter.getFinishedSpans().filter((span) => span.name === name),
    async reset() {
      exporter.reset();
      await reader.collect();
    },
    async collect() {
      const { resourceMetrics } = await reader.collect();
      return allMetrics(resourceMetrics);
    },
    async stop() {
      await sdk.shutdown();
      disableGlobals();
    },
  };
}

/** Mocha hooks for one `describe`: installed before its tests, emptied before each, removed after. */
export function useTelemetryCapture(): () => TelemetryCapture {
  let capture: TelemetryCapture | undefined;
  before(() => {
    capture = installTelemetryCapture();
  });
  beforeEach(async () => {
    await capture?.reset();
  });
  after(async () => {
    await capture?.stop();
    capture = undefined;
  });
  return () => {
    if (!capture) throw new Error("telemetry capture is used outside its describe block");
    return capture;
  };
}

function disableGlobals(): void {
  trace.disable();
  metrics.disable();
  context.disable();
  propagation.disable();
}

function allMetrics(resourceMetrics: ResourceMetrics): MetricData[] {
  return resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics);
}

/** The sum of a counter's points (or a histogram's counts) whose attributes include `where`. */
export function metricTotal(data: MetricData[], name: string, where: Attributes = {}): number {
  let total = 0;
  for (const metric of data.filter((m) => m.descriptor.name === name)) {
    for (const point of metric.dataPoints) {
      if (!matches(point.attributes, where)) continue;
      if (metric.dataPointType === DataPointType.HISTOGRAM) {
        total += (point.value as { count: number }).count;
      } else {
        total += point.value as number;
      }
    }
  }
  return total;
}

/** The histogram points of `name` whose attributes include `where`: their count and sum. */
export function histogramOf(
  data: MetricData[],
  name: string,
  where: Attributes = {},
): { count: number; sum: number } {
  let count = 0;
  let sum = 0;
  for (const metric of data.filter((m) => m.descriptor.name === name)) {
    if (metric.dataPointType !== DataPointType.HISTOGRAM) throw new Error(`${name} is not a histogram`);
    for (const point of metric.dataPoints) {
      if (!matches(point.attributes, where)) continue;
      count += point.value.count;
      sum += point.value.sum ?? 0;
    }
  }
  return { count, sum };
}

function matches(attributes: Attributes, where: Attributes): boolean {
  return Object.entries(where).every(([key, value]) => attributes[key] === value);
}
