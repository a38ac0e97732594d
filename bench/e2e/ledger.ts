// `node bench/e2e.ts --only ledger`: the worker's CPU a message by subtraction (issue 41, item 6). `sbinbox worker`
// processes as a user starts them drain CPU_MESSAGES each at LEDGER_CONCURRENCY, one transaction a message
// (SBINBOX_BATCH_SIZE=1) and batched (`auto`, the default), first with every layer on and spans and metrics
// exported over OTLP/HTTP to a sink in this process, then with one layer switched off at a time. Rounds alternate
// the variants, in reverse on even rounds (A B C, C B A, A B C ...), and each cell is the median of its rounds,
// beside the floor's (a bare subscribe() + complete loop plus a bare pg loop of the same four statements, in this
// process, at the same concurrency). CPU from /proc/<pid>/stat of the worker process, not wall time.
import { loadavg } from "node:os";
import { formatTable } from "../common.ts";
import { median } from "../median.ts";
import { floor } from "./ceilings.ts";
import { CPU_MESSAGES, type Harness } from "./harness.ts";
import { OtlpSink } from "./otlp-sink.ts";
import { target, type Target } from "./targets.ts";
import { CPU_NODE_OPTIONS, maxRss, runWorkerProcess, type WorkerRun } from "./worker-process.ts";

const env = process.env;
/** maxConcurrentCalls of the ledger's workers and of the floor's loops (the 32). */
export const LEDGER_CONCURRENCY = Number(env.SBINBOX_BENCH_LEDGER_CONCURRENCY ?? 32);
export const LEDGER_ROUNDS = Number(env.SBINBOX_BENCH_LEDGER_ROUNDS ?? 3);
/** Only these variants (their names, comma-separated), e.g. `all on,no telemetry`; unset: all. */
const PICK = env.SBINBOX_BENCH_LEDGER_VARIANTS?.split(",").map((v) => v.trim());
/** `single`, `auto` or both (default). */
const MODES = (env.SBINBOX_BENCH_LEDGER_MODES ?? "single,auto").split(",").map((m) => m.trim());

interface Variant {
  readonly name: string;
  /** Run in the batched mode too (the single mode runs every variant). */
  readonly batched?: boolean;
  /** Run this entry instead of the checkout's (the "before" rows). */
  readonly bin?: string;
  /** Node and V8 flags of the worker process (the heap rows). */
  readonly execArgv?: readonly string[];
  /** What is switched off, and by which setting. */
  readonly setting: string;
  readonly env: (sink: OtlpSink) => Record<string, string>;
}

const exported = (sink: OtlpSink): Record<string, string> => ({
  OTEL_TRACES_EXPORTER: "otlp",
  OTEL_METRICS_EXPORTER: "otlp",
  OTEL_EXPORTER_OTLP_ENDPOINT: sink.endpoint,
  SBINBOX_LOG_LEVEL: "info",
});
const NO_TELEMETRY = { OTEL_SDK_DISABLED: "true" };
/**
 * The root sampling ratios of the sampled rows (OpenTelemetry's ParentBased(TraceIdRatio), by its own settings),
 * comma-separated; `SBINBOX_BENCH_LEDGER_SAMPLE_RATIO` is the older name for one.
 */
const SAMPLE_RATIOS = (
  env.SBINBOX_BENCH_LEDGER_SAMPLE_RATIOS ??
  env.SBINBOX_BENCH_LEDGER_SAMPLE_RATIO ??
  "0.1,0.01"
)
  .split(",")
  .map((r) => r.trim())
  .filter((r) => r !== "");
const sampledRow = (ratio: string) => `sampled ${ratio}`;
/**
 * bin/sbinbox.js of a copy of the code before a change: adds its "all on" and sampled rows (", before") beside this
 * code's, alternated in each round, so a change to the sampled path is measured against the code before it.
 */
const BEFORE_BIN = env.SBINBOX_BENCH_LEDGER_BEFORE_BIN;
/**
 * Further heap rows, each a set of Node/V8 flags for a worker with no telemetry, `;` between sets (e.g.
 * `--heap-growing-percent=50;--max-semi-space-size=8`): each row is named `flags <set>` and runs in both modes.
 */
const HEAP_FLAGS = (env.SBINBOX_BENCH_LEDGER_HEAP_FLAGS ?? "")
  .split(";")
  .map((f) => f.trim())
  .filter((f) => f !== "");
/** The rows whose telemetry cost the ledger prints (row minus `- telemetry`) against the target. */
const TELEMETRY_ROWS = ["all on", ...SAMPLE_RATIOS.map(sampledRow)].flatMap((row) =>
  BEFORE_BIN ? [row, `${row}, before`] : [row],
);
/** Issue 41's budget for telemetry with spans exported, in us a message. */
const TELEMETRY_TARGET_US = 40;

/** Every layer on, then each off in turn (the batcher's row is the single mode's own), then all of them off. */
const VARIANTS: readonly Variant[] = [
  {
    name: "all on",
    setting: "spans and metrics exported (OTLP/HTTP), info logs",
    env: exported,
    batched: true,
  },
  ...(BEFORE_BIN
    ? [{ name: "all on, before", setting: `the same, running ${BEFORE_BIN}`, env: exported, bin: BEFORE_BIN }]
    : []),
  ...SAMPLE_RATIOS.flatMap((ratio): Variant[] => {
    const sampled: Variant = {
      name: sampledRow(ratio),
      batched: true,
      setting: `OTEL_TRACES_SAMPLER=parentbased_traceidratio, OTEL_TRACES_SAMPLER_ARG=${ratio}`,
      env: (s) => ({
        ...exported(s),
        OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG: ratio,
      }),
    };
    if (!BEFORE_BIN) return [sampled];
    const before = { ...sampled, name: `${sampled.name}, before`, bin: BEFORE_BIN };
    return [sampled, { ...before, setting: `the same, running ${BEFORE_BIN}` }];
  }),
  {
    name: "- spans",
    // Batched too: beside `- telemetry` it is what the SDK's presence costs (bench/telemetry-cost.ts resolves it).
    batched: true,
    setting: "OTEL_TRACES_EXPORTER=none",
    env: (s) => ({ ...exported(s), OTEL_TRACES_EXPORTER: "none" }),
  },
  {
    name: "- metrics",
    setting: "OTEL_METRICS_EXPORTER=none",
    env: (s) => ({ ...exported(s), OTEL_METRICS_EXPORTER: "none" }),
  },
  {
    name: "- telemetry",
    batched: true,
    setting: "OTEL_SDK_DISABLED=true (as with nothing configured)",
    env: () => ({ ...NO_TELEMETRY, SBINBOX_LOG_LEVEL: "info" }),
  },
  {
    // bin/sbinbox.js sets a 4 MB semi-space and a 20% heap growth for the worker unless a flag is given; 0 is V8's
    // own sizing for both. These rows weigh the collector's CPU against the resident memory those flags save.
    name: "V8 young gen",
    batched: true,
    setting: "no telemetry, --max-semi-space-size=0 (V8's sizing of the young generation; RSS in max MB)",
    execArgv: ["--max-semi-space-size=0"],
    env: () => ({ ...NO_TELEMETRY, SBINBOX_LOG_LEVEL: "info" }),
  },
  {
    name: "V8 heap",
    batched: true,
    setting:
      "no telemetry, --max-semi-space-size=0 --heap-growing-percent=0 (V8's sizing of both generations)",
    execArgv: ["--max-semi-space-size=0", "--heap-growing-percent=0"],
    env: () => ({ ...NO_TELEMETRY, SBINBOX_LOG_LEVEL: "info" }),
  },
  ...HEAP_FLAGS.map((flags): Variant => ({
    name: `flags ${flags}`,
    batched: true,
    setting: `no telemetry, ${flags}`,
    execArgv: flags.split(/\s+/),
    env: () => ({ ...NO_TELEMETRY, SBINBOX_LOG_LEVEL: "info" }),
  })),
  {
    name: "- logging",
    setting: "SBINBOX_LOG_LEVEL=error",
    env: (s) => ({ ...exported(s), SBINBOX_LOG_LEVEL: "error" }),
  },
  {
    name: "- progress",
    setting: "SBINBOX_BENCH_LAYERS_OFF=progress",
    env: (s) => ({ ...exported(s), SBINBOX_BENCH_LAYERS_OFF: "progress" }),
  },
  {
    name: "- lock renewal",
    setting: "SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS=0",
    env: (s) => ({ ...exported(s), SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS: "0" }),
  },
  {
    name: "- settlement guard",
    setting: "SBINBOX_BENCH_LAYERS_OFF=settlement-guard",
    env: (s) => ({ ...exported(s), SBINBOX_BENCH_LAYERS_OFF: "settlement-guard" }),
  },
  {
    name: "all off",
    batched: true,
    setting: "all of the above at once",
    env: () => ({
      ...NO_TELEMETRY,
      SBINBOX_LOG_LEVEL: "error",
      SBINBOX_BENCH_LAYERS_OFF: "progress,settlement-guard",
      SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS: "0",
    }),
  },
];

/** A `flags <set>` row runs whatever SBINBOX_BENCH_LEDGER_VARIANTS says (it is asked for by its own setting). */
const isHeapFlagsRow = (v: Variant): boolean =>
  v.name.startsWith("flags ") && HEAP_FLAGS.includes(v.name.slice("flags ".length));

interface Cell {
  readonly runs: WorkerRun[];
  readonly traceKb: number[];
}

const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");

/** The ledger's lines and targets. */
export async function ledger(h: Harness): Promise<{ lines: string[]; targets: Target[] }> {
  const sink = await OtlpSink.start();
  const variants = VARIANTS.filter((v) => PICK === undefined || PICK.includes(v.name) || isHeapFlagsRow(v));
  const modes = MODES.map((m) => (m === "auto" ? ("auto" as const) : 1));
  const cells = new Map<string, Cell>();
  const floors: number[] = [];
  const loads: string[] = [];
  try {
    for (let round = 0; round < LEDGER_ROUNDS; round += 1) {
      loads.push(load());
      process.stdout.write(`ledger round ${round + 1} of ${LEDGER_ROUNDS}, load average ${load()}\n`);
      floors.push((await floor(h, CPU_MESSAGES, LEDGER_CONCURRENCY)).totalUs);
      for (const batchSize of modes) {
        // Even rounds run the variants in reverse, so that no variant always follows the same one (a
        // collector's or a cache's state left by the run before, or a load that rises through a round).
        for (const v of round % 2 === 0 ? variants : [...variants].reverse()) {
          if (batchSize === "auto" && v.batched !== true) continue;
          const before = sink.snapshot();
          const run = await runWorkerProcess(h, {
            messages: CPU_MESSAGES,
            batchSize,
            nodeOptions: CPU_NODE_OPTIONS,
            concurrency: LEDGER_CONCURRENCY,
            env: v.env(sink),
            ...(v.bin ? { bin: v.bin } : {}),
            ...(v.execArgv ? { execArgv: v.execArgv } : {}),
          });
          const key = `${String(batchSize)}|${v.name}`;
          const cell = cells.get(key) ?? { runs: [], traceKb: [] };
          cell.runs.push(run);
          cell.traceKb.push((sink.snapshot().traceBytes - before.traceBytes) / 1024);
          cells.set(key, cell);
          process.stdout.write(
            `  ${String(batchSize).padEnd(4)} ${v.name.padEnd(20)} ${run.cpuUs.toFixed(0).padStart(5)} us/msg ` +
              `${run.rate.toFixed(0).padStart(5)} msgs/s ${run.writes.toFixed(2)} writes/msg ` +
              `${run.preempted.toFixed(2)} preempted/msg ` +
              `${maxRss(run).toFixed(0)} MB, load ${load()}\n`,
          );
        }
      }
    }
  } finally {
    await sink.stop();
  }
  loads.push(load());
  const floorUs = median(floors);
  const cpu = (mode: number | "auto", name: string): number | undefined => {
    const cell = cells.get(`${String(mode)}|${name}`);
    return cell ? median(cell.runs.map((r) => r.cpuUs)) : undefined;
  };
  const lines = [
    `ledger: sbinbox worker processes (maxConcurrentCalls ${LEDGER_CONCURRENCY}) draining ${CPU_MESSAGES} each, ` +
      `${LEDGER_ROUNDS} alternated rounds (even rounds in reverse order), medians (min-max); CPU a message from ` +
      `/proc between the first and last sample with messages done; floor ${floorUs.toFixed(0)} us (a bare ` +
      `receive-and-complete loop plus a bare pg loop of the same four statements at ${LEDGER_CONCURRENCY}; ` +
      `rounds ${floors.map((f) => f.toFixed(0)).join(", ")}); ` +
      `load average at each round's start and the end: ${loads.join(" | ")}`,
  ];
  const targets: Target[] = [];
  for (const mode of modes) {
    const base = cpu(mode, "all on");
    const rows = variants.flatMap((v) => {
      const cell = cells.get(`${String(mode)}|${v.name}`);
      if (cell === undefined) return [];
      const us = cell.runs.map((r) => r.cpuUs);
      const m = median(us);
      return [
        [
          v.name,
          v.setting,
          m.toFixed(0),
          `${Math.min(...us).toFixed(0)}-${Math.max(...us).toFixed(0)}`,
          base === undefined || v.name === "all on" ? "" : (base - m).toFixed(0),
          (m / floorUs).toFixed(2),
          median(cell.runs.map((r) => r.rate)).toFixed(0),
          median(cell.runs.map((r) => r.writes)).toFixed(2),
          median(cell.runs.map((r) => r.roundTrips)).toFixed(2),
          median(cell.runs.map((r) => r.preempted)).toFixed(2),
          median(cell.traceKb).toFixed(0),
          median(cell.runs.map(maxRss)).toFixed(0),
        ],
      ];
    });
    if (mode === "auto" && base !== undefined) {
      const single = cpu(1, "all on");
      if (single !== undefined)
        rows.push([
          "- batcher",
          "SBINBOX_BATCH_SIZE=1 (the single mode's all on)",
          single.toFixed(0),
          "",
          (base - single).toFixed(0),
          (single / floorUs).toFixed(2),
          "",
          "",
          "",
          "",
          "",
          "",
        ]);
    }
    lines.push(
      mode === 1
        ? "one transaction a message (SBINBOX_BATCH_SIZE=1):"
        : "batched (SBINBOX_BATCH_SIZE=auto, the default):",
      ...formatTable(
        [
          "variant",
          "switched off by",
          "cpu us/msg",
          "min-max",
          "saves us",
          "x floor",
          "msgs/s",
          "writes/msg",
          "rt/msg",
          "preempted/msg",
          "spans KB sent",
          "max RSS MB",
        ],
        rows,
      ),
    );
    const label = mode === 1 ? "single" : "batched";
    const off = cpu(mode, "- telemetry");
    if (off !== undefined) {
      const pairs: [string, number][] = [];
      for (const name of TELEMETRY_ROWS) {
        const us = cpu(mode, name);
        if (us === undefined) continue;
        // The code before a change is printed beside, not judged against the target.
        if (!name.endsWith(", before"))
          pairs.push([`us, ${name === "all on" ? "every span" : name}`, us - off]);
        lines.push(
          `  telemetry cost, ${label}, ${name}: ${(us - off).toFixed(0)} us a message (${us.toFixed(0)} - ` +
            `${off.toFixed(0)} with no SDK); target <= ${TELEMETRY_TARGET_US}: ` +
            (us - off <= TELEMETRY_TARGET_US
              ? "met"
              : `missed by ${(us - off - TELEMETRY_TARGET_US).toFixed(0)} us`),
        );
      }
      if (pairs.length > 0)
        targets.push(
          target(
            `telemetry <= ${TELEMETRY_TARGET_US} us a message, spans exported, ${label}`,
            pairs,
            (x) => x <= TELEMETRY_TARGET_US,
          ),
        );
    }
    const limit = mode === 1 ? 1.5 : 1.2;
    for (const name of ["- telemetry", "all on"]) {
      const us = cpu(mode, name);
      const telemetry = name === "all on" ? "telemetry exported" : "no telemetry configured";
      if (us !== undefined)
        targets.push(
          target(
            `worker CPU <= ${limit} x the floor, ${label}, ${telemetry}`,
            [["x floor", us / floorUs]],
            (x) => x <= limit,
          ),
        );
    }
  }
  lines.push("");
  return { lines, targets };
}
