// `npm run bench:telemetry-cost`: what telemetry costs one message, in CPU microseconds, without the broker or the
// database, so the layers the ledger (bench/e2e/ledger.ts) cannot resolve at its 40 us target can be told apart.
// Each configuration runs in a child process of its own that registers telemetry exactly as the worker does
// (src/telemetry/setup.ts, OTLP/http/protobuf to the ledger's stand-in sink in this process), then drives the
// worker's own per-message code N times in a tight async loop: recordConsumed, startProcessSpan, processMessage
// (the example's transactional handler) against the real traced inbox (traceInboxStore(InboxCore(traceInboxDriver(
// PostgresDriver)))) whose pg pool answers at once in memory, traceSettlement of a `complete` that does nothing,
// recordSettlement, recordProcessed and endProcessSpan, as receiver.ts and worker.ts call them. The happy path
// writes no log line (the worker logs a message only on retry or failure), so no logger call is driven.
// CPU is process.cpuUsage() over the loop plus the SDK's shutdown (which exports what is buffered), per message.
// Left out: the sockets (AMQP, pg wire), the Service Bus SDK, the lock renewal, progress, the settlement guard,
// the batcher (group commit), and the garbage the rest of the worker makes (SBINBOX_BENCH_TELEMETRY_GARBAGE_KB
// stands in for it; docs/benchmark.md). Rounds alternate the configurations; each figure is the median.
import { spawn } from "node:child_process";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { formatTable } from "./common.ts";
import { median } from "./median.ts";
import { OtlpSink } from "./e2e/otlp-sink.ts";

const MESSAGES = Number(process.env.SBINBOX_BENCH_TELEMETRY_MESSAGES ?? 20_000);
const WARMUP = Number(process.env.SBINBOX_BENCH_TELEMETRY_WARMUP ?? 3_000);
const ROUNDS = Number(process.env.SBINBOX_BENCH_TELEMETRY_ROUNDS ?? 5);
/** Messages between turns of the event loop: the exporters' timers and sockets run there, as in the worker. */
const YIELD_EVERY = 16;
/**
 * The rest of the worker's garbage, stood in for: KB of small objects allocated a message, the last RETAINED
 * messages' kept (as in-flight messages are), so some survive scavenges and are promoted. 0 (the default): none.
 * With it the children run with the worker's V8 settings (bin/sbinbox.js: --max-semi-space-size=4,
 * --heap-growing-percent=20), to show what the SDK's live heap adds to the worker's full collections.
 */
const GARBAGE_KB = Number(process.env.SBINBOX_BENCH_TELEMETRY_GARBAGE_KB ?? 0);
const RETAINED = 512;
const WORKER_V8 = GARBAGE_KB > 0 ? ["--max-semi-space-size=4", "--heap-growing-percent=20"] : [];
const QUEUE = "orders";
/** Node options of the children, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` for a profile of each. */
const CHILD_NODE_OPTIONS = process.env.SBINBOX_BENCH_TELEMETRY_NODE_OPTIONS ?? "";
/** Only these configurations (names, comma-separated); unset: all. "no SDK" is always run, as the baseline. */
const PICK = process.env.SBINBOX_BENCH_TELEMETRY_CONFIGS?.split(",").map((c) => c.trim());

interface Config {
  readonly name: string;
  readonly env: (endpoint: string) => Record<string, string>;
  /** The child's script: this one, or its copy in a checkout of other code (BEFORE). */
  readonly script?: string;
}
const exported = (endpoint: string): Record<string, string> => ({
  OTEL_TRACES_EXPORTER: "otlp",
  OTEL_METRICS_EXPORTER: "otlp",
  OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
});
const sampled = (ratio: string) => (endpoint: string) => ({
  ...exported(endpoint),
  OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
  OTEL_TRACES_SAMPLER_ARG: ratio,
});
const ALL_CONFIGS: readonly Config[] = [
  { name: "no SDK", env: () => ({ OTEL_SDK_DISABLED: "true" }) },
  { name: "metrics only", env: (e) => ({ ...exported(e), OTEL_TRACES_EXPORTER: "none" }) },
  { name: "sampled 0.01", env: sampled("0.01") },
  { name: "sampled 0.1", env: sampled("0.1") },
  { name: "every span", env: exported },
  // A setting a team can make (the OTLP exporters read it): the span batches are repetitive text, gzip shrinks them.
  { name: "every span gzip", env: (e) => ({ ...exported(e), OTEL_EXPORTER_OTLP_COMPRESSION: "gzip" }) },
];

/**
 * bench/telemetry-cost.ts in a copy of the code before a change (its src/ and this bench beside it): each picked
 * configuration runs there too, as "<name>, before", alternated with this code's.
 */
const BEFORE = process.env.SBINBOX_BENCH_TELEMETRY_BEFORE;
const PICKED = ALL_CONFIGS.filter((c) => c.name === "no SDK" || PICK === undefined || PICK.includes(c.name));
const CONFIGS: readonly Config[] = BEFORE
  ? PICKED.flatMap((c) =>
      c.name === "no SDK" ? [c] : [c, { ...c, name: `${c.name}, before`, script: BEFORE }],
    )
  : PICKED;

interface ChildResult {
  readonly usPerMessage: number;
  readonly userUs: number;
  readonly systemUs: number;
  /** Spans the SDK's tracer was asked to start, a message (recorded or not: the sampler sees each). */
  readonly spanStarts?: number;
  /** Records into the SDK's synchronous instruments (counter add, histogram record), a message. */
  readonly metricRecords?: number;
}

const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");

async function main(): Promise<void> {
  if (process.argv[2] === "--child") return child();
  const sink = await OtlpSink.start();
  const results = new Map<string, ChildResult[]>();
  const bytes = new Map<string, number[]>();
  const loads = [load()];
  try {
    for (let round = 0; round < ROUNDS; round += 1) {
      process.stdout.write(`round ${round + 1} of ${ROUNDS}, load average ${load()}\n`);
      for (const config of CONFIGS) {
        const before = sink.snapshot();
        const result = await runChild(config.env(sink.endpoint), config.script);
        const after = sink.snapshot();
        results.set(config.name, [...(results.get(config.name) ?? []), result]);
        bytes.set(config.name, [
          ...(bytes.get(config.name) ?? []),
          (after.traceBytes - before.traceBytes) / (MESSAGES + WARMUP),
        ]);
        process.stdout.write(
          `  ${config.name.padEnd(26)} ${result.usPerMessage.toFixed(1).padStart(6)} us\n`,
        );
      }
    }
  } finally {
    await sink.stop();
  }
  loads.push(load());
  const us = (name: string) => median(results.get(name)!.map((r) => r.usPerMessage));
  const base = us("no SDK");
  const metricsOnly = results.has("metrics only") ? us("metrics only") : undefined;
  const range = (name: string) => {
    const all = results.get(name)!.map((r) => r.usPerMessage);
    return `${Math.min(...all).toFixed(1)}-${Math.max(...all).toFixed(1)}`;
  };
  const rows = CONFIGS.map((c) => [
    c.name,
    us(c.name).toFixed(1),
    range(c.name),
    (us(c.name) - base).toFixed(1),
    c.name === "no SDK" || c.name.startsWith("metrics only") || metricsOnly === undefined
      ? ""
      : (us(c.name) - metricsOnly).toFixed(1),
    median(bytes.get(c.name)!).toFixed(0),
    count(results.get(c.name)!, (r) => r.spanStarts),
    count(results.get(c.name)!, (r) => r.metricRecords),
  ]);
  const lines = [
    `telemetry-cost: ${MESSAGES} messages a child (after ${WARMUP} warm-up), ${ROUNDS} alternated rounds, ` +
      `medians; CPU (process.cpuUsage) of the worker's per-message telemetry and inbox code, no sockets` +
      (GARBAGE_KB > 0 ? `; ${GARBAGE_KB} KB of garbage a message, the worker's V8 settings` : ""),
    ...formatTable(
      [
        "config",
        "us/msg",
        "min-max",
        "over no SDK",
        "over metrics",
        "trace B/msg",
        "span starts/msg",
        "records/msg",
      ],
      rows,
    ),
    `load average at the start and the end: ${loads.join(" | ")}`,
  ];
  for (const c of CONFIGS.filter((c) => c.name !== "no SDK" && !c.name.startsWith("metrics only"))) {
    const cost = us(c.name) - base;
    lines.push(
      `  telemetry <= 40 us a message, ${c.name}: ${cost.toFixed(1)} us, ` +
        `${cost <= 40 ? "met" : `missed by ${(cost - 40).toFixed(1)} us`}`,
    );
  }
  process.stdout.write(`${lines.join("\n")}\n`);
}

/** A per-message count's median over the rounds, "-" where the SDK was not there to count in. */
function count(all: readonly ChildResult[], pick: (r: ChildResult) => number | undefined): string {
  const values = all.map(pick).filter((v): v is number => v !== undefined);
  return values.length === 0 ? "-" : median(values).toFixed(2);
}

function runChild(
  env: Record<string, string>,
  script = fileURLToPath(import.meta.url),
): Promise<ChildResult> {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(
      ([k]) => !k.startsWith("OTEL_") && !k.startsWith("APPLICATIONINSIGHTS_"),
    ),
  );
  return new Promise((resolve, reject) => {
    const args = [...WORKER_V8, ...CHILD_NODE_OPTIONS.split(/\s+/).filter(Boolean), script, "--child"];
    const proc = spawn(process.execPath, args, {
      env: { ...clean, ...env },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    proc.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    proc.on("error", reject);
    proc.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`telemetry-cost child exited ${code}`));
      resolve(JSON.parse(out.trim().split("\n").pop()!) as ChildResult);
    });
  });
}

async function child(): Promise<void> {
  // As bin/sbinbox.js: telemetry first, then the program's modules, so their tracers and meters are the SDK's.
  const { startTelemetry } = await import("../src/telemetry/setup.ts");
  const telemetry = await startTelemetry({ serviceName: "sbinbox-bench" });
  const counts = await countSdkCalls();
  const { oneMessage } = await import("./telemetry-cost-message.ts");
  const message = await oneMessage(QUEUE);
  const kept: unknown[] = [];
  const run = async (i: number): Promise<void> => {
    await message(i);
    if (GARBAGE_KB > 0) kept[i % RETAINED] = garbage(GARBAGE_KB);
  };
  for (let i = 0; i < WARMUP; i += 1) {
    await run(i);
    if (i % YIELD_EVERY === 0) await new Promise((r) => setImmediate(r));
  }
  counts?.reset();
  const start = process.cpuUsage();
  for (let i = 0; i < MESSAGES; i += 1) {
    await run(WARMUP + i);
    if (i % YIELD_EVERY === 0) await new Promise((r) => setImmediate(r));
  }
  // Counted: what is still buffered is exported here, as the worker would a little later.
  await telemetry.shutdown();
  const used = process.cpuUsage(start);
  const result: ChildResult = {
    usPerMessage: (used.user + used.system) / MESSAGES,
    userUs: used.user,
    systemUs: used.system,
    ...(counts && { spanStarts: counts.spans / MESSAGES, metricRecords: counts.records / MESSAGES }),
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

/**
 * Counts span starts (the registered tracer's startSpan, which the SDK's startActiveSpan calls too) and synchronous metric
 * records (SyncInstrument's _record, under every add and record), by wrapping the SDK classes' prototypes that the
 * registered providers hand out: the same counts in this code and in a BEFORE checkout, with no change to either's
 * src. An increment each, next to the microseconds measured. Undefined when the SDK is disabled (nothing to count).
 */
async function countSdkCalls(): Promise<{ spans: number; records: number; reset(): void } | undefined> {
  if (process.env.OTEL_SDK_DISABLED === "true") return undefined;
  const { metrics, trace } = await import("@opentelemetry/api");
  const counts = { spans: 0, records: 0, reset: () => ((counts.spans = 0), (counts.records = 0)) };
  const tracer = (trace.getTracerProvider() as { getDelegate?: () => { getTracer(n: string): object } })
    .getDelegate?.()
    .getTracer("bench-probe");
  // The tracer the provider in use hands out (the SDK's; the API's no-op one with OTEL_TRACES_EXPORTER=none).
  if (tracer !== undefined) {
    const proto = Object.getPrototypeOf(tracer) as { startSpan: (...args: unknown[]) => unknown };
    const startSpan = proto.startSpan;
    proto.startSpan = function (this: unknown, ...args: unknown[]) {
      counts.spans += 1;
      return startSpan.apply(this, args);
    };
  }
  const probe = metrics.getMeterProvider().getMeter("bench-probe").createCounter("bench.probe");
  const sync = Object.getPrototypeOf(Object.getPrototypeOf(probe)) as {
    _record?: (...args: unknown[]) => unknown;
  };
  if (typeof sync._record !== "function") return tracer === undefined ? undefined : counts;
  const record = sync._record;
  sync._record = function (this: unknown, ...args: unknown[]) {
    counts.records += 1;
    return record.apply(this, args);
  };
  return counts;
}

/** About `kb` KB of small objects (a message's decoded properties, buffers' wrappers, closures). */
function garbage(kb: number): unknown[] {
  const objects: unknown[] = [];
  for (let i = 0; i < kb * 16; i += 1) objects.push({ i, s: `x${i}` });
  return objects;
}

await main();
