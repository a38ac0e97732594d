// The publisher rows of `npm run bench` (alone: `npm run bench:publisher`). Whole processes, as a user runs them,
// against `sbinbox broker` on loopback (a fresh broker for each contender's run, so none inherits another's backlog):
// `sbinbox publish --count N`, a plain @azure/service-bus script (bench/plain-sdk-publish.ts) and the library's
// publishBatch (bench/library-publish.ts), in turns; then start-up (`--count 1`), and the peak memory of
// `sbinbox publish --file` for two file sizes. Wall time, CPU time and peak RSS come from GNU time.
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { formatTable } from "./common.ts";
import { freePort } from "../src/embedded/free-port.ts";
import { median } from "./median.ts";

const COUNT = Number(process.env.SBINBOX_BENCH_PUBLISH_COUNT ?? 60_000);
const ROUNDS = Number(process.env.SBINBOX_BENCH_PUBLISH_ROUNDS ?? 3);
/** Start-up runs of each contender; one process's wall time moves a lot on a shared machine, so several. */
const STARTS = Number(process.env.SBINBOX_BENCH_PUBLISH_STARTS ?? 9);
const FILE_SIZES = [COUNT, COUNT * 4];
/**
 * `sbinbox publish --file` replaces itself (process.execve) with a 4 MB semi-space unless one is given
 * (bin/sbinbox.js); `--max-semi-space-size=0` asks for V8's own sizing, to show what that is for. One process, so
 * GNU time's peak is the whole command's.
 */
const FILE_NODE_OPTIONS = ["", "--max-semi-space-size=0"];
const QUEUE = "sbinbox";
const path = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const BIN = path("../bin/sbinbox.js");

interface Sample {
  wall: number;
  cpu: number;
  peakMb: number;
  /** Messages per second inside the process, from its own report (connection included, imports not). */
  rate: number;
}

const spread = (xs: number[], digits: number) =>
  `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)})`;

/** Runs `node args` under GNU time; its stdout must report "<count> ... in <seconds> s". */
async function measure(args: string[], env: NodeJS.ProcessEnv, dir: string): Promise<Sample> {
  const timeFile = join(dir, "time");
  const child = spawn("/usr/bin/time", ["-o", timeFile, "-f", "%e %U %S %M", process.execPath, ...args], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  if (code !== 0) throw new Error(`node ${args.join(" ")} exited with ${code}:\n${out}\n${err.slice(-2000)}`);
  const [wall, user, sys, maxKb] = (await readFile(timeFile, "utf8")).trim().split(/\s+/).map(Number) as [
    number,
    number,
    number,
    number,
  ];
  // The CLI's own line first: a traced run also prints its span to stdout.
  const reported =
    /published (\d+) events to \S+ in ([\d.]+) s/.exec(out) ?? /(\d+)\D+?in ([\d.]+) s/.exec(out);
  if (!reported) throw new Error(`no "<n> in <s> s" in the output of node ${args.join(" ")}: ${out}`);
  return { wall, cpu: user + sys, peakMb: maxKb / 1024, rate: Number(reported[1]) / Number(reported[2]) };
}

/** A fresh `sbinbox broker` on a free port; resolves with its connection string and a stop function. */
async function startBroker(): Promise<{ connectionString: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const child = spawn(process.execPath, [BIN, "broker", "--port", String(port)], {
    env: cleanEnv(),
    stdio: ["ignore", "pipe", "ignore"],
  });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  let out = "";
  const connectionString = await new Promise<string>((resolve, reject) => {
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      out += d;
      const line = out.split("\n").find((l) => l.startsWith("Endpoint="));
      if (line) resolve(line.trim());
    });
    child.once("exit", (code) => reject(new Error(`sbinbox broker exited with ${code}: ${out}`)));
  });
  return {
    connectionString,
    stop: async () => {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(SBINBOX_|OTEL_|APPLICATIONINSIGHTS_)/.test(k)) env[k] = v;
  }
  return { ...env, ...extra };
}

const cli =
  (extra: string[], env: Record<string, string> = {}) =>
  (cs: string, n: number) => ({
    args: [BIN, "publish", "--count", String(n), ...extra],
    env: cleanEnv({
      SBINBOX_SERVICEBUS_CONNECTION_STRING: cs,
      SBINBOX_QUEUE: QUEUE,
      ...(env.NODE_DISABLE_COMPILE_CACHE ? {} : { NODE_COMPILE_CACHE: compileCache }),
      ...env,
    }),
  });

/** One compile cache for every contender (the CLI turns it on itself; the scripts get it from this variable). */
let compileCache = "";
const cached = (env: NodeJS.ProcessEnv) => ({ ...env, NODE_COMPILE_CACHE: compileCache });

const contenders = {
  cli: cli([]),
  /**
   * With an OpenTelemetry SDK registered (console exporter: the one span goes to stdout, no network), so the
   * trace context is built and copied into every message.
   */
  "cli, traced": cli([], { OTEL_TRACES_EXPORTER: "console", OTEL_METRICS_EXPORTER: "none" }),
  "cli --in-flight 4": cli(["--in-flight", "4"]),
  /** Start-up without Node's compile cache, as the very first run after an install or an upgrade. */
  "cli, no compile cache": cli([], { NODE_DISABLE_COMPILE_CACHE: "1" }),
  sdk: (cs: string, n: number) => ({
    args: [path("./plain-sdk-publish.ts"), cs, QUEUE, String(n)],
    env: cached(cleanEnv()),
  }),
  /** The plain script with sbinbox's derived MessageIds: what is left once the derivation's cost is paid. */
  "sdk + derived ids": (cs: string, n: number) => ({
    args: [path("./plain-sdk-publish.ts"), cs, QUEUE, String(n), "--derived"],
    env: cached(cleanEnv()),
  }),
  library: (cs: string, n: number) => ({
    args: [path("./library-publish.ts"), cs, QUEUE, String(n), "1000"],
    env: cached(cleanEnv()),
  }),
};
type Name = keyof typeof contenders;

export async function publisherBench(): Promise<string[]> {
  const dir = await mkdtemp(join(tmpdir(), "sbinbox-bench-publish-"));
  const names = Object.keys(contenders) as Name[];
  const runs = Object.fromEntries(names.map((n) => [n, [] as Sample[]])) as Record<Name, Sample[]>;
  const starts = Object.fromEntries(names.map((n) => [n, [] as Sample[]])) as Record<Name, Sample[]>;
  const fileRuns: { lines: number; nodeOptions: string; sample: Sample }[] = [];
  try {
    compileCache = join(dir, "compile-cache");
    // Each contender once, untimed, so every one starts the timed runs with a filled compile cache.
    {
      const broker = await startBroker();
      try {
        for (const name of names) {
          const c = contenders[name](broker.connectionString, 1);
          await measure(c.args, c.env, dir);
        }
      } finally {
        await broker.stop();
      }
    }
    for (let round = 0; round < ROUNDS; round += 1) {
      process.stdout.write(`publisher: round ${round + 1} of ${ROUNDS} ...\n`);
      // Turns rotate, so no contender always runs first (warm disk cache, a quieter moment); each run gets a
      // fresh broker, so no contender sends into another's backlog.
      const order = names.map((_, i) => names[(i + round) % names.length]!);
      for (const name of order) {
        const broker = await startBroker();
        try {
          const c = contenders[name](broker.connectionString, COUNT);
          runs[name].push(await measure(c.args, c.env, dir));
        } finally {
          await broker.stop();
        }
      }
    }
    // Start-up: every contender once a turn, in rotating order, STARTS turns, against one broker (one event each).
    {
      process.stdout.write(`publisher: start-up, ${STARTS} runs each ...\n`);
      const broker = await startBroker();
      try {
        for (let turn = 0; turn < STARTS; turn += 1) {
          for (const name of names.map((_, i) => names[(i + turn) % names.length]!)) {
            const one = contenders[name](broker.connectionString, 1);
            starts[name].push(await measure(one.args, one.env, dir));
          }
        }
      } finally {
        await broker.stop();
      }
    }
    for (const lines of FILE_SIZES) {
      const file = join(dir, `events-${lines}.jsonl`);
      const text: string[] = [];
      for (let i = 0; i < lines; i += 1) {
        const body = { accountId: `acc-${i % 50}`, amount: (i % 100) + 1, reference: `file #${i}` };
        text.push(JSON.stringify({ type: "AccountCredited", key: `file-${lines}-${i}`, body }));
      }
      await writeFile(file, text.join("\n") + "\n");
      for (const nodeOptions of FILE_NODE_OPTIONS) {
        const broker = await startBroker();
        try {
          const env = cleanEnv({
            SBINBOX_SERVICEBUS_CONNECTION_STRING: broker.connectionString,
            NODE_OPTIONS: nodeOptions,
          });
          fileRuns.push({
            lines,
            nodeOptions,
            sample: await measure([BIN, "publish", "--file", file], env, dir),
          });
        } finally {
          await broker.stop();
        }
      }
      // The plain SDK streaming the same file (readline, random MessageIds), as the baseline of the rows above.
      const broker = await startBroker();
      try {
        fileRuns.push({
          lines,
          nodeOptions: "plain SDK",
          sample: await measure(
            [path("./plain-sdk-publish.ts"), broker.connectionString, QUEUE, "--file", file],
            cached(cleanEnv()),
            dir,
          ),
        });
      } finally {
        await broker.stop();
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const sdk = runs.sdk;
  /** The CPU a message costs: the run's CPU less the start-up run's (same process, one event), over the rest. */
  const perMessage = (name: Name) =>
    (median(runs[name].map((x) => x.cpu)) - median(starts[name].map((x) => x.cpu))) / (COUNT - 1);
  const rows = names.map((name) => {
    const r = runs[name];
    const s = starts[name];
    return [
      name,
      spread(
        r.map((x) => x.rate),
        0,
      ),
      // CPU per message, the main ratio: on a shared machine it moves least with the other processes' load.
      (perMessage(name) * 1e6).toFixed(1),
      (perMessage("sdk") / perMessage(name)).toFixed(2),
      (median(r.map((x) => x.rate)) / median(sdk.map((x) => x.rate))).toFixed(2),
      spread(
        r.map((x) => x.wall),
        2,
      ),
      (median(sdk.map((x) => x.wall)) / median(r.map((x) => x.wall))).toFixed(2),
      median(r.map((x) => x.cpu)).toFixed(2),
      median(r.map((x) => x.peakMb)).toFixed(0),
      spread(
        s.map((x) => x.wall),
        2,
      ),
      (median(starts.sdk.map((x) => x.wall)) / median(s.map((x) => x.wall))).toFixed(2),
      median(s.map((x) => x.cpu)).toFixed(2),
      (median(starts.sdk.map((x) => x.cpu)) / median(s.map((x) => x.cpu))).toFixed(2),
    ];
  });
  const header = [
    "who",
    "msgs/s in process",
    "cpu µs/msg",
    "sdk/cpu",
    "rate/sdk",
    "wall s",
    "sdk/wall",
    "cpu s",
    "peak MB",
    "start-up s",
    "sdk/start",
    "start cpu s",
    "sdk/start cpu",
  ];
  return [
    `publisher: ${COUNT} demo-sized JSON events per process, medians of ${ROUNDS} rounds (min-max), a fresh ` +
      `sbinbox broker per run, one shared compile cache; cli = sbinbox publish --count, sdk = plain ` +
      `@azure/service-bus (random MessageIds, size-filled batches), library = publishBatch of 1000 per call; ` +
      `cpu µs/msg = (CPU of the run - median CPU of the start-up runs) / ${COUNT - 1}; start-up = the same with ` +
      `1 event, median (min-max) of ${STARTS} runs each, in turns against one broker`,
    ...formatTable(header, rows),
    "targets: sdk/cpu and rate/sdk >= 0.90 (cli and library), sdk/start and sdk/start cpu >= 0.80 (cli)",
    ...fileRuns.map(
      ({ lines, nodeOptions, sample }) =>
        `${nodeOptions === "plain SDK" ? "plain SDK script --file" : "sbinbox publish --file"}, ` +
        `${String(lines).padStart(7)} lines${nodeOptions === "plain SDK" ? "" : `, NODE_OPTIONS "${nodeOptions}"`}: ` +
        `peak ${sample.peakMb.toFixed(0)} MB, ${sample.rate.toFixed(0)} msgs/s in process, ` +
        `${sample.cpu.toFixed(2)} s CPU, ${sample.wall.toFixed(2)} s wall`,
    ),
    "target: with the CLI's own settings (NODE_OPTIONS \"\"), the peak does not grow with the file's size",
  ];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.stdout.write((await publisherBench()).join("\n") + "\n");
}
