// `sbinbox worker` as a user starts it (`node bin/sbinbox.js worker`, which the npm bin shim runs), draining a
// backlog in its own process: its resident set (the memory target) and its CPU per message (the CPU target),
// both read from /proc, and its database round trips through the bench's proxy.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { freePort } from "../../src/embedded/free-port.ts";
import { ask, freshEvents, prefill, sleep, RSS_QUEUE, type Counts, type Harness } from "./harness.ts";
import { perMessage } from "./proxy.ts";

/** The worker's entry; SBINBOX_BENCH_WORKER_BIN names another, e.g. a copy of bin/ and dist/ without src/. */
export const BIN =
  process.env.SBINBOX_BENCH_WORKER_BIN ?? fileURLToPath(new URL("../../bin/sbinbox.js", import.meta.url));
/** SBINBOX_HANDLERS for these processes (e.g. a module with a statements handler); unset: the example's. */
const HANDLERS = process.env.SBINBOX_BENCH_WORKER_HANDLERS;
/** NODE_OPTIONS added to the CPU runs, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` for a profile of each. */
export const CPU_NODE_OPTIONS = process.env.SBINBOX_BENCH_CPU_NODE_OPTIONS ?? "";

function passWarnings(stream: Readable): void {
  createInterface({ input: stream }).on("line", (line) => {
    if (!/^\{"level":"(info|debug)"/.test(line)) process.stderr.write(`${line}\n`);
  });
}

function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN) / 1024;
}

/** User + system CPU of a process in microseconds (/proc/<pid>/stat counts clock ticks of 10 ms). */
function cpuUs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** Write system calls a process has made (/proc/<pid>/io syscw: write, writev and the like, sockets included). */
function writeCalls(pid: number): number {
  const io = readFileSync(`/proc/${pid}/io`, "utf8");
  return Number(/syscw:\s+(\d+)/.exec(io)?.[1] ?? NaN);
}

/**
 * Times the main thread was switched out while it could run (/proc/<pid>/status `nonvoluntary_ctxt_switches`, the
 * thread group leader, i.e. the JavaScript thread): a socket write that wakes its reader (the proxy, PostgreSQL, the
 * broker) on a busy machine can hand the core over inside the write. A CPU profile samples wall time and counts such a
 * wait as time in the write; /proc's CPU does not.
 */
function preemptions(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/nonvoluntary_ctxt_switches:\s+(\d+)/.exec(status)?.[1] ?? NaN);
}

interface Sample {
  readonly done: number;
  readonly rss: number;
  readonly cpu: number;
  readonly writes: number;
  readonly preempted: number;
  readonly t: number;
}

export interface WorkerRun {
  readonly samples: readonly Sample[];
  readonly messages: number;
  /** CPU per message from the first sample with messages done to the last. */
  readonly cpuUs: number;
  /** Write system calls per message over the same span: a count, steady on a busy machine. */
  readonly writes: number;
  /** The main thread's involuntary context switches per message over the same span (see `preemptions`). */
  readonly preempted: number;
  readonly rate: number;
  readonly roundTrips: number;
  readonly commits: number;
}

/** A `sbinbox worker` process draining `messages`; RSS, CPU and progress sampled every `everyMs`. */
export async function runWorkerProcess(
  h: Harness,
  options: {
    messages: number;
    /** SBINBOX_BATCH_SIZE: a number, or "auto" (the worker's default). */
    batchSize: number | "auto";
    nodeOptions: string;
    everyMs?: number;
    inFlight?: number;
    /** SBINBOX_MAX_CONCURRENT_CALLS; unset: the worker's default (16). */
    concurrency?: number;
    /** Further settings for the process (the ledger's switches, OTEL_*); they win over the bench's own. */
    env?: Readonly<Record<string, string>>;
    /** Another entry than BIN, e.g. bin/sbinbox.js of a copy of the code before a change. */
    bin?: string;
    /** Node and V8 flags before the entry (flags NODE_OPTIONS refuses, e.g. --heap-growing-percent). */
    execArgv?: readonly string[];
  },
): Promise<WorkerRun> {
  const { messages } = options;
  await prefill(h, freshEvents(messages), RSS_QUEUE);
  const before = await h.proxy.counts();
  const child = spawn(process.execPath, [...(options.execArgv ?? []), options.bin ?? BIN, "worker"], {
    env: {
      ...Object.fromEntries(
        Object.entries(process.env).filter(([k]) => !k.startsWith("SBINBOX_") && !k.startsWith("OTEL_")),
      ),
      SBINBOX_SERVICEBUS_CONNECTION_STRING: h.connectionString,
      SBINBOX_POSTGRES_URL: h.url,
      SBINBOX_QUEUE: RSS_QUEUE,
      SBINBOX_CONSUMER: "rss",
      SBINBOX_LOG_LEVEL: "error",
      SBINBOX_BATCH_SIZE: String(options.batchSize),
      ...(options.inFlight ? { SBINBOX_BATCH_MAX_IN_FLIGHT: String(options.inFlight) } : {}),
      ...(HANDLERS ? { SBINBOX_HANDLERS: HANDLERS } : {}),
      SBINBOX_HTTP_HOST: "127.0.0.1",
      PORT: String(await freePort()),
      NODE_OPTIONS: options.nodeOptions,
      ...(options.concurrency ? { SBINBOX_MAX_CONCURRENT_CALLS: String(options.concurrency) } : {}),
      ...options.env,
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  // The worker's log lines go to a pipe that this process reads (as App Service reads a container's), and only
  // warnings and errors are passed on: at info each run would print its start and stop lines.
  passWarnings(child.stderr);
  const samples: Sample[] = [];
  const started = performance.now();
  try {
    for (;;) {
      await sleep(options.everyMs ?? 500);
      const c = await ask<Counts>(h.broker, { counts: RSS_QUEUE });
      const done = messages - c.active - c.locked;
      if (child.exitCode !== null) throw new Error(`the worker exited with ${child.exitCode}`);
      samples.push({
        done,
        rss: rssMb(child.pid!),
        cpu: cpuUs(child.pid!),
        writes: writeCalls(child.pid!),
        preempted: preemptions(child.pid!),
        t: (performance.now() - started) / 1000,
      });
      if (c.active + c.locked === 0) break;
    }
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    }
  }
  const counts = perMessage(before, await h.proxy.counts(), messages);
  const first = samples.find((s) => s.done > 0) ?? samples[0]!;
  const end = samples.at(-1)!;
  const span = Math.max(1, end.done - first.done);
  return {
    samples,
    messages,
    cpuUs: (end.cpu - first.cpu) / span,
    writes: (end.writes - first.writes) / span,
    preempted: (end.preempted - first.preempted) / span,
    rate: span / Math.max(0.001, end.t - first.t),
    ...counts,
  };
}

/** The memory part's lines: RSS at the start, each quarter and the end of the drain. */
export function memoryLines(run: WorkerRun, batchSize: number, nodeOptions: string): string[] {
  const { samples, messages } = run;
  const firstWorking = samples.find((s) => s.done > 0) ?? samples[0]!;
  const at = (fraction: number) => samples.find((s) => s.done >= messages * fraction) ?? samples.at(-1)!;
  const end = samples.at(-1)!;
  const max = Math.max(...samples.map((s) => s.rss));
  const line = (label: string, s: Sample) =>
    `  ${label.padEnd(6)} ${s.rss.toFixed(1).padStart(6)} MB  ` +
    `after ${String(s.done).padStart(6)} messages, ${s.t.toFixed(1)} s`;
  const quarter = at(0.25);
  return [
    `memory: RSS of one sbinbox worker process (maxConcurrentCalls 16, batch size ${batchSize}, ` +
      `NODE_OPTIONS "${nodeOptions}") draining ${messages} messages (${run.rate.toFixed(0)} msgs/s, ` +
      `${run.cpuUs.toFixed(0)} us CPU a message)` +
      (process.env.SBINBOX_BENCH_WORKER_BIN ? `, running ${BIN}` : ""),
    line("start", firstWorking),
    line("25%", quarter),
    line("50%", at(0.5)),
    line("75%", at(0.75)),
    line("end", end),
    `  max ${max.toFixed(1)} MB (target <= 150: ${max <= 150 ? "met" : "missed"}); end - 25%: ` +
      `${(end.rss - quarter.rss).toFixed(1)} MB (target: not growing)`,
  ];
}

export const maxRss = (run: WorkerRun): number => Math.max(...run.samples.map((s) => s.rss));
