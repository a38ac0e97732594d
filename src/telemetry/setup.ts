import type { AzureMonitorExporterOptions } from "@azure/monitor-opentelemetry-exporter";
import type { IMetricReader, PushMetricExporter } from "@opentelemetry/sdk-metrics";
import type { Sampler, SpanExporter, SpanProcessor } from "@opentelemetry/sdk-trace";
import { ConfigError } from "../domain/errors.ts";

export type TraceExporterName = "otlp" | "console" | "azuremonitor";
export type MetricExporterName = "otlp" | "console" | "azuremonitor";
export type OtlpProtocol = "http/protobuf" | "http/json" | "grpc";

/** What the environment asks for, decided before anything is loaded. */
export interface TelemetryPlan {
  readonly traces: readonly TraceExporterName[];
  readonly metrics: readonly MetricExporterName[];
  readonly tracesProtocol: OtlpProtocol;
  readonly metricsProtocol: OtlpProtocol;
  readonly metricExportIntervalMs: number;
  /** OTEL_METRIC_EXPORT_TIMEOUT; no more than the interval. */
  readonly metricExportTimeoutMs: number;
  /** The batch span processor's OTEL_BSP_* settings, or the specification's defaults. */
  readonly batchSpans: BatchSpanSettings;
  /** OTEL_TRACES_SAMPLER and its OTEL_TRACES_SAMPLER_ARG, checked; absent for the SDK's default. */
  readonly sampler?: SamplerPlan;
  readonly azureMonitor?: {
    readonly connectionString: string;
    /** Entra ID authentication (Application Insights with local authentication disabled). */
    readonly entraId?: { readonly managedIdentityClientId?: string };
  };
}

export interface BatchSpanSettings {
  readonly scheduledDelayMillis: number;
  readonly exportTimeoutMillis: number;
  readonly maxQueueSize: number;
  readonly maxExportBatchSize: number;
}

export interface TelemetryOptions {
  /** Where the OTEL_* and APPLICATIONINSIGHTS_* settings are read from; the process environment by default. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** `service.name` when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names one. */
  readonly serviceName?: string;
}

export interface Telemetry {
  readonly plan: TelemetryPlan;
  /** False when nothing is configured: no SDK was started, the API stays a no-op and nothing is sent. */
  readonly active: boolean;
  /** Flushes what is buffered and stops the exporters. */
  shutdown(): Promise<void>;
}

/**
 * The samplers OTEL_TRACES_SAMPLER names: OpenTelemetry's six, and Azure Monitor's two under the names its
 * distribution reads (they set `microsoft.sample_rate`, from which Application Insights counts what a kept span
 * stands for; docs/telemetry.md, "Sampling").
 */
export type SamplerName =
  | "always_on"
  | "always_off"
  | "traceidratio"
  | "parentbased_always_on"
  | "parentbased_always_off"
  | "parentbased_traceidratio"
  | "microsoft.fixed_percentage"
  | "microsoft.rate_limited";
export interface SamplerPlan {
  readonly name: SamplerName;
  /** The ratio (0 to 1) of the ratio samplers, or the traces a second of `microsoft.rate_limited`. */
  readonly arg?: number;
}
const RATIO_SAMPLERS = ["traceidratio", "parentbased_traceidratio", "microsoft.fixed_percentage"];
const SAMPLERS: readonly SamplerName[] = [
  "always_on",
  "always_off",
  "traceidratio",
  "parentbased_always_on",
  "parentbased_always_off",
  "parentbased_traceidratio",
  "microsoft.fixed_percentage",
  "microsoft.rate_limited",
];

const TRACE_EXPORTERS = ["otlp", "console", "none"] as const;
const METRIC_EXPORTERS = ["otlp", "console", "none"] as const;
const PROTOCOLS: readonly OtlpProtocol[] = ["http/protobuf", "http/json", "grpc"];

/**
 * Reads the standard OpenTelemetry settings. Unlike the SDK's own defaults, nothing configured means nothing
 * exported: the SDK would otherwise send to an OTLP collector on localhost that is usually not there.
 * An OTLP endpoint alone (OTEL_EXPORTER_OTLP_ENDPOINT) is enough to turn OTLP on.
 */
export function planTelemetry(
  env: Readonly<Record<string, string | undefined>> = process.env,
): TelemetryPlan {
  const disabled = (env.OTEL_SDK_DISABLED ?? "").trim().toLowerCase() === "true";
  const connectionString = env.APPLICATIONINSIGHTS_CONNECTION_STRING?.trim();
  const azureMonitor = disabled || !connectionString ? undefined : azureMonitorPlan(connectionString, env);
  const endpoint = (signal: string): boolean =>
    Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env[`OTEL_EXPORTER_OTLP_${signal}_ENDPOINT`]?.trim());

  const traces: TraceExporterName[] = disabled
    ? []
    : exporterList(env, "OTEL_TRACES_EXPORTER", TRACE_EXPORTERS, endpoint("TRACES"));
  const metrics: MetricExporterName[] = disabled
    ? []
    : exporterList(env, "OTEL_METRICS_EXPORTER", METRIC_EXPORTERS, endpoint("METRICS"));
  if (azureMonitor) {
    traces.push("azuremonitor");
    metrics.push("azuremonitor");
  }
  return {
    traces,
    metrics,
    tracesProtocol: protocol(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
    metricsProtocol: protocol(env, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"),
    ...metricExport(env),
    batchSpans: batchSpanSettings(env),
    ...(disabled ? {} : samplerPlan(env, azureMonitor !== undefined)),
    ...(azureMonitor ? { azureMonitor } : {}),
  };
}

/**
 * Starts the OpenTelemetry Node SDK with the exporters the environment names, and registers it as the global
 * tracer and meter provider. Call it before the program's own modules are loaded (see register.ts).
 */
export async function startTelemetry(options: TelemetryOptions = {}): Promise<Telemetry> {
  const env = options.env ?? process.env;
  const plan = planTelemetry(env);
  if (plan.traces.length === 0 && plan.metrics.length === 0) {
    return { plan, active: false, shutdown: () => Promise.resolve() };
  }
  const [{ registerProviders }, spanProcessors, metricReaders, sampler] = await Promise.all([
    import("./providers.ts"),
    createSpanProcessors(plan),
    createMetricReaders(plan),
    // Always ours: the SDK would read OTEL_TRACES_SAMPLER itself and keep every span on a value it does not know.
    createSampler(plan.sampler),
  ]);
  const named =
    Boolean(env.OTEL_SERVICE_NAME?.trim()) ||
    /(^|,)\s*service\.name\s*=/.test(env.OTEL_RESOURCE_ATTRIBUTES ?? "");
  // What NodeSDK would register, without the exporters, logs SDK and instrumentation loader it imports unused
  // (providers.ts). Logs go to stdout/stderr as JSON lines (logger.ts), where App Service collects them.
  const sdk = registerProviders({
    sampler,
    spanProcessors,
    metricReaders,
    ...(named ? {} : { serviceName: options.serviceName ?? "sbinbox" }),
  });
  let stopped: Promise<void> | undefined;
  return {
    plan,
    active: true,
    shutdown: () => (stopped ??= sdk.shutdown()),
  };
}

/** The sampler the plan names; the SDK's default, ParentBased(AlwaysOn), when it names none. */
export async function createSampler(plan: SamplerPlan | undefined): Promise<Sampler> {
  const otel = await import("@opentelemetry/sdk-trace");
  const arg = plan?.arg ?? 1;
  switch (plan?.name ?? "parentbased_always_on") {
    case "always_on":
      return new otel.AlwaysOnSampler();
    case "always_off":
      return new otel.AlwaysOffSampler();
    case "traceidratio":
      return new otel.TraceIdRatioBasedSampler(arg);
    case "parentbased_always_off":
      return new otel.ParentBasedSampler({ root: new otel.AlwaysOffSampler() });
    case "parentbased_traceidratio":
      return new otel.ParentBasedSampler({ root: new otel.TraceIdRatioBasedSampler(arg) });
    case "microsoft.fixed_percentage":
      return new (await import("@azure/monitor-opentelemetry-exporter")).ApplicationInsightsSampler(arg);
    case "microsoft.rate_limited":
      return new (await import("@azure/monitor-opentelemetry-exporter")).RateLimitedSampler(arg);
    default:
      return new otel.ParentBasedSampler({ root: new otel.AlwaysOnSampler() });
  }
}

async function createSpanProcessors(plan: TelemetryPlan): Promise<SpanProcessor[]> {
  if (plan.traces.length === 0) return [];
  const { BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor } =
    await import("@opentelemetry/sdk-trace");
  const processors: SpanProcessor[] = [];
  for (const name of plan.traces) {
    if (name === "console") {
      // Printed as each span ends, so the output reads in order with the program's own.
      processors.push(new SimpleSpanProcessor({ exporter: new ConsoleSpanExporter() }));
    } else if (name === "otlp") {
      const exporter = await otlpTraceExporter(plan.tracesProtocol);
      processors.push(new BatchSpanProcessor({ exporter, ...plan.batchSpans }));
    } else {
      const { AzureMonitorTraceExporter } = await import("@azure/monitor-opentelemetry-exporter");
      const exporter = new AzureMonitorTraceExporter(await azureMonitorOptions(plan));
      processors.push(new BatchSpanProcessor({ exporter, ...plan.batchSpans }));
    }
  }
  return processors;
}

async function createMetricReaders(plan: TelemetryPlan): Promise<IMetricReader[]> {
  if (plan.metrics.length === 0) return [];
  const { ConsoleMetricExporter, PeriodicExportingMetricReader } = await import("@opentelemetry/sdk-metrics");
  const readers: IMetricReader[] = [];
  for (const name of plan.metrics) {
    let exporter: PushMetricExporter;
    if (name === "console") {
      exporter = new ConsoleMetricExporter();
    } else if (name === "otlp") {
      exporter = await otlpMetricExporter(plan.metricsProtocol);
    } else {
      const { AzureMonitorMetricExporter } = await import("@azure/monitor-opentelemetry-exporter");
      // Built against sdk-metrics 2.x; the export contract (ResourceMetrics in, ExportResult out) is unchanged in 3.x.
      exporter = new AzureMonitorMetricExporter(await azureMonitorOptions(plan));
    }
    readers.push(
      new PeriodicExportingMetricReader({
        exporter,
        exportIntervalMillis: plan.metricExportIntervalMs,
        exportTimeoutMillis: plan.metricExportTimeoutMs,
      }),
    );
  }
  return readers;
}

// Each OTLP exporter reads its endpoint, headers, timeout and compression from OTEL_EXPORTER_OTLP_* itself.
async function otlpTraceExporter(protocol: OtlpProtocol): Promise<SpanExporter> {
  if (protocol === "grpc")
    return new (await import("@opentelemetry/exporter-trace-otlp-grpc")).OTLPTraceExporter();
  if (protocol === "http/json")
    return new (await import("@opentelemetry/exporter-trace-otlp-http")).OTLPTraceExporter();
  return new (await import("@opentelemetry/exporter-trace-otlp-proto")).OTLPTraceExporter();
}

async function otlpMetricExporter(protocol: OtlpProtocol): Promise<PushMetricExporter> {
  if (protocol === "grpc")
    return new (await import("@opentelemetry/exporter-metrics-otlp-grpc")).OTLPMetricExporter();
  if (protocol === "http/json")
    return new (await import("@opentelemetry/exporter-metrics-otlp-http")).OTLPMetricExporter();
  return new (await import("@opentelemetry/exporter-metrics-otlp-proto")).OTLPMetricExporter();
}

async function azureMonitorOptions(plan: TelemetryPlan): Promise<AzureMonitorExporterOptions> {
  const azure = plan.azureMonitor;
  if (!azure) throw new Error("azure monitor exporter requested without a connection string");
  if (!azure.entraId) return { connectionString: azure.connectionString };
  const { DefaultAzureCredential } = await import("@azure/identity");
  const clientId = azure.entraId.managedIdentityClientId;
  const credential = new DefaultAzureCredential(clientId ? { managedIdentityClientId: clientId } : {});
  return { connectionString: azure.connectionString, credential };
}

function azureMonitorPlan(
  connectionString: string,
  env: Readonly<Record<string, string | undefined>>,
): NonNullable<TelemetryPlan["azureMonitor"]> {
  if (!/(^|;)\s*InstrumentationKey\s*=\s*[^;\s]/i.test(connectionString)) {
    throw new ConfigError("APPLICATIONINSIGHTS_CONNECTION_STRING", "has no InstrumentationKey=...");
  }
  // The setting Azure's own agents read: "Authorization=AAD" or "Authorization=AAD;ClientId=<client id>".
  const auth = env.APPLICATIONINSIGHTS_AUTHENTICATION_STRING?.trim();
  if (!auth) return { connectionString };
  const fields = new Map(
    auth
      .split(";")
      .filter((part) => part.includes("="))
      .map((part) => {
        const at = part.indexOf("=");
        return [part.slice(0, at).trim().toLowerCase(), part.slice(at + 1).trim()] as const;
      }),
  );
  if (fields.get("authorization")?.toUpperCase() !== "AAD") {
    throw new ConfigError(
      "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
      'expected "Authorization=AAD[;ClientId=<id>]"',
    );
  }
  const clientId = fields.get("clientid");
  return { connectionString, entraId: clientId ? { managedIdentityClientId: clientId } : {} };
}

/**
 * OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, checked here: the SDK logs a wrong value to a diagnostic
 * logger nobody has installed and then keeps every span, so a typo would silently cost what sampling saves.
 */
function samplerPlan(
  env: Readonly<Record<string, string | undefined>>,
  azureMonitor: boolean,
): { sampler?: SamplerPlan } {
  const raw = env.OTEL_TRACES_SAMPLER?.trim();
  if (!raw) return {};
  const name = raw.toLowerCase() as SamplerName;
  if (!SAMPLERS.includes(name)) {
    throw new ConfigError("OTEL_TRACES_SAMPLER", `unknown sampler "${raw}"; use ${SAMPLERS.join(", ")}`);
  }
  if (name.startsWith("microsoft.") && !azureMonitor) {
    throw new ConfigError(
      "OTEL_TRACES_SAMPLER",
      `"${name}" is Azure Monitor's sampler and needs APPLICATIONINSIGHTS_CONNECTION_STRING; ` +
        "use parentbased_traceidratio for other exporters",
    );
  }
  const argRaw = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  const ratio = RATIO_SAMPLERS.includes(name);
  if (name === "microsoft.rate_limited" || (ratio && argRaw)) {
    if (!argRaw) {
      throw new ConfigError("OTEL_TRACES_SAMPLER_ARG", `"${name}" needs the traces a second, e.g. 5`);
    }
    const arg = Number(argRaw);
    const valid = ratio ? arg >= 0 && arg <= 1 : arg >= 0 && Number.isFinite(arg);
    if (!Number.isFinite(arg) || !valid) {
      const expected = ratio
        ? "a ratio from 0 to 1 (0.1 keeps one trace in ten)"
        : "traces a second, 0 or more";
      throw new ConfigError("OTEL_TRACES_SAMPLER_ARG", `expected ${expected} for "${name}", got "${argRaw}"`);
    }
    return { sampler: { name, arg } };
  }
  // A ratio sampler without its argument keeps every trace, as the OpenTelemetry specification defines it (1.0).
  return { sampler: { name } };
}

function exporterList<T extends string>(
  env: Readonly<Record<string, string | undefined>>,
  setting: string,
  allowed: readonly (T | "none")[],
  endpointGiven: boolean,
): T[] {
  const raw = env[setting]?.trim();
  if (!raw) return endpointGiven ? ["otlp" as T] : [];
  const names = [...new Set(raw.split(",").map((name) => name.trim().toLowerCase()))].filter(Boolean);
  for (const name of names) {
    if (!(allowed as readonly string[]).includes(name)) {
      throw new ConfigError(setting, `unknown exporter "${name}"; use ${allowed.join(", ")}`);
    }
  }
  if (names.includes("none")) {
    if (names.length > 1) throw new ConfigError(setting, `"none" cannot be combined with other exporters`);
    return [];
  }
  return names as T[];
}

function protocol(env: Readonly<Record<string, string | undefined>>, setting: string): OtlpProtocol {
  const specific = env[setting]?.trim();
  const value = specific || env.OTEL_EXPORTER_OTLP_PROTOCOL?.trim() || "http/protobuf";
  const name = specific ? setting : "OTEL_EXPORTER_OTLP_PROTOCOL";
  if (!(PROTOCOLS as readonly string[]).includes(value)) {
    throw new ConfigError(name, `unknown protocol "${value}"; use ${PROTOCOLS.join(", ")}`);
  }
  return value as OtlpProtocol;
}

/**
 * OTEL_METRIC_EXPORT_INTERVAL and OTEL_METRIC_EXPORT_TIMEOUT (60000 and 30000 by default). A default timeout
 * longer than a set interval is cut to it, as the SDK does; a set one longer than the interval is refused.
 */
function metricExport(
  env: Readonly<Record<string, string | undefined>>,
): Pick<TelemetryPlan, "metricExportIntervalMs" | "metricExportTimeoutMs"> {
  const interval = positiveInt(env, "OTEL_METRIC_EXPORT_INTERVAL", 60_000);
  const timeout = positiveInt(env, "OTEL_METRIC_EXPORT_TIMEOUT", Math.min(30_000, interval));
  if (timeout > interval)
    throw new ConfigError(
      "OTEL_METRIC_EXPORT_TIMEOUT",
      `${timeout} ms is longer than OTEL_METRIC_EXPORT_INTERVAL (${interval} ms); an export must end before the next`,
    );
  return { metricExportIntervalMs: interval, metricExportTimeoutMs: timeout };
}

/**
 * OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT, OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE, with
 * the specification's defaults (5000, 30000, 2048, 512). Read here because a BatchSpanProcessor built in code
 * takes only its options. A default batch larger than a set queue is cut to it; a set one is refused.
 */
function batchSpanSettings(env: Readonly<Record<string, string | undefined>>): BatchSpanSettings {
  const maxQueueSize = positiveInt(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048, "spans");
  const maxExportBatchSize = positiveInt(
    env,
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    Math.min(512, maxQueueSize),
    "spans",
  );
  if (maxExportBatchSize > maxQueueSize)
    throw new ConfigError(
      "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
      `${maxExportBatchSize} spans is more than OTEL_BSP_MAX_QUEUE_SIZE (${maxQueueSize})`,
    );
  return {
    scheduledDelayMillis: positiveInt(env, "OTEL_BSP_SCHEDULE_DELAY", 5000),
    exportTimeoutMillis: positiveInt(env, "OTEL_BSP_EXPORT_TIMEOUT", 30_000),
    maxQueueSize,
    maxExportBatchSize,
  };
}

function positiveInt(
  env: Readonly<Record<string, string | undefined>>,
  setting: string,
  fallback: number,
  unit = "milliseconds",
): number {
  const raw = env[setting]?.trim();
  if (!raw) return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0)
    throw new ConfigError(setting, `expected a positive whole number of ${unit}, got "${raw}"`);
  return value;
}

/**
 * Whether these settings print telemetry to stdout (OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER "console"):
 * a parent that runs `sbinbox` children then passes their stdout through instead of discarding it.
 */
export function writesTelemetryToConsole(
  env: Readonly<Record<string, string | undefined>> = process.env,
): boolean {
  try {
    const plan = planTelemetry(env);
    return plan.traces.includes("console") || plan.metrics.includes("console");
  } catch {
    return false; // the child reports the bad setting itself
  }
}
