import { context, diag, DiagConsoleLogger, metrics, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  CompositePropagator,
  diagLogLevelFromString,
  getNumberFromEnv,
  getStringFromEnv,
  getStringListFromEnv,
  W3CBaggagePropagator,
  W3CTraceContextPropagator,
} from "@opentelemetry/core";
import {
  defaultResource,
  detectResources,
  envDetector,
  hostDetector,
  osDetector,
  processDetector,
  resourceFromAttributes,
  serviceInstanceIdDetector,
  type ResourceDetector,
} from "@opentelemetry/resources";
import { MeterProvider, type IMetricReader } from "@opentelemetry/sdk-metrics";
import { TracerProvider, type Sampler, type SpanLimits, type SpanProcessor } from "@opentelemetry/sdk-trace";
import { ATTR_SERVICE_NAME } from "@opentelemetry/semantic-conventions";
import { ConfigError } from "../domain/errors.ts";

export interface ProviderOptions {
  readonly sampler: Sampler;
  readonly spanProcessors: readonly SpanProcessor[];
  readonly metricReaders: readonly IMetricReader[];
  /** `service.name` when the environment names none. */
  readonly serviceName?: string;
  /**
   * False: the default resource only, no detectors (NodeSDK's `autoDetectResources: false`). For tests that read a
   * span as it ends: the host detector's `host.id` is read asynchronously, and until it is in a SimpleSpanProcessor
   * exports later.
   */
  readonly detectResources?: boolean;
}

/**
 * What NodeSDK.start() registers for the worker, built from the SDK's own parts: the AsyncLocalStorage context
 * manager, the W3C propagators, the resource of its default detectors, a meter provider with the readers and a
 * tracer provider with the span processors (none when there are none). Not NodeSDK itself: it imports every
 * exporter, the logs SDK and the instrumentation loader whether used or not (a process with NodeSDK started had
 * 24.8 MB of live heap after a full collection, with these parts 15.1 MB), and a worker's every full garbage
 * collection marks that heap again (docs/benchmark.md).
 * Reads NodeSDK's settings: OTEL_LOG_LEVEL, OTEL_PROPAGATORS, OTEL_NODE_RESOURCE_DETECTORS,
 * OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME (the env detector), OTEL_*_COUNT_LIMIT / *_LENGTH_LIMIT. Where it
 * differs (docs/telemetry.md): an unknown propagator or detector stops the start, where NodeSDK warned and skipped
 * it; b3 / b3multi are refused; a listed subset of detectors runs in the default order; and
 * OTEL_NODE_EXPERIMENTAL_SDK_METRICS (the SDK's metrics about itself) is not read.
 */
export function registerProviders(options: ProviderOptions): { shutdown(): Promise<void> } {
  const logLevel = getStringFromEnv("OTEL_LOG_LEVEL");
  if (logLevel !== undefined)
    diag.setLogger(new DiagConsoleLogger(), { logLevel: diagLogLevelFromString(logLevel) });
  const propagator = propagatorFromEnv();
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  if (propagator !== null) propagation.setGlobalPropagator(propagator);
  let resource = defaultResource();
  if (options.detectResources !== false)
    resource = resource.merge(detectResources({ detectors: resourceDetectors() }));
  if (options.serviceName !== undefined)
    resource = resource.merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: options.serviceName }));
  const meterProvider =
    options.metricReaders.length > 0
      ? new MeterProvider({ resource, readers: [...options.metricReaders] })
      : undefined;
  if (meterProvider) metrics.setGlobalMeterProvider(meterProvider);
  const tracerProvider =
    options.spanProcessors.length > 0
      ? new TracerProvider({
          sampler: options.sampler,
          spanLimits: spanLimitsFromEnv(),
          resource,
          spanProcessors: [...options.spanProcessors],
        })
      : undefined;
  if (tracerProvider) trace.setGlobalTracerProvider(tracerProvider);
  return {
    shutdown: async () => {
      await Promise.all([tracerProvider?.shutdown(), meterProvider?.shutdown()]);
    },
  };
}

/** OTEL_PROPAGATORS: `tracecontext` and `baggage` (the default, both), or `none`; null for none. */
function propagatorFromEnv(): CompositePropagator | W3CTraceContextPropagator | W3CBaggagePropagator | null {
  const names = [...new Set(getStringListFromEnv("OTEL_PROPAGATORS") ?? ["tracecontext", "baggage"])];
  if (names.includes("none")) return null;
  const known = { tracecontext: W3CTraceContextPropagator, baggage: W3CBaggagePropagator };
  const propagators = names.map((name) => {
    // Service Bus carries W3C trace context (Diagnostic-Id, traceparent); NodeSDK's b3 / b3multi headers have no
    // place there. NodeSDK warned and skipped an unknown name; refused here, so a typo cannot drop propagation.
    if (!(name in known))
      throw new ConfigError(
        "OTEL_PROPAGATORS",
        `unknown propagator "${name}"; use tracecontext, baggage, none`,
      );
    return new known[name as keyof typeof known]();
  });
  return propagators.length === 1 ? propagators[0]! : new CompositePropagator({ propagators });
}

/**
 * OTEL_NODE_RESOURCE_DETECTORS: `all` (the default), `none`, or names among these. detectResources merges in
 * order and a later detector's value wins, so they run in NodeSDK's default order with `env` last: what
 * OTEL_RESOURCE_ATTRIBUTES sets (service.instance.id, from which Azure Monitor takes cloud_RoleInstance; host.name)
 * wins over what is detected. A list of names runs in this order too, whatever order it is written in.
 */
function resourceDetectors(): ResourceDetector[] {
  const all: Record<string, ResourceDetector> = {
    serviceinstance: serviceInstanceIdDetector,
    process: processDetector,
    host: hostDetector,
    os: osDetector,
    env: envDetector,
  };
  const names = getStringListFromEnv("OTEL_NODE_RESOURCE_DETECTORS") ?? ["all"];
  if (names.includes("all")) return Object.values(all);
  if (names.includes("none")) return [];
  for (const name of names) {
    if (!(name in all))
      throw new ConfigError(
        "OTEL_NODE_RESOURCE_DETECTORS",
        `unknown detector "${name}"; use ${Object.keys(all).join(", ")}, all, none`,
      );
  }
  return Object.entries(all)
    .filter(([name]) => names.includes(name))
    .map(([, detector]) => detector);
}

/** The span limits as NodeSDK reads them (sdk-node create-from-env.mjs createSpanLimitsFromEnv), old names too. */
function spanLimitsFromEnv(): SpanLimits {
  const limits: Record<string, number | undefined> = {
    attributeCountLimit:
      getNumberFromEnv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT") ?? getNumberFromEnv("OTEL_ATTRIBUTE_COUNT_LIMIT"),
    attributeValueLengthLimit:
      getNumberFromEnv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT") ??
      getNumberFromEnv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"),
    eventCountLimit: getNumberFromEnv("OTEL_SPAN_EVENT_COUNT_LIMIT"),
    linkCountLimit: getNumberFromEnv("OTEL_SPAN_LINK_COUNT_LIMIT"),
    attributePerEventCountLimit:
      getNumberFromEnv("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT") ??
      getNumberFromEnv("OTEL_SPAN_ATTRIBUTE_PER_EVENT_COUNT_LIMIT"),
    attributePerLinkCountLimit:
      getNumberFromEnv("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT") ??
      getNumberFromEnv("OTEL_SPAN_ATTRIBUTE_PER_LINK_COUNT_LIMIT"),
  };
  return Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== undefined));
}
