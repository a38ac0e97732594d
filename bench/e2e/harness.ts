// What every part of the end-to-end bench shares: its settings, the broker in a child process, the proxy that all
// database connections go through, and a worker draining a prefilled backlog with its rate, CPU and round trips.
import type { ChildProcess } from "node:child_process";
import { ServiceBusClient } from "@azure/service-bus";
import type { Database } from "../../src/app/database.ts";
import { openDatabase } from "../../src/app/database.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { accountCreditedHandler, accountCreditedStatementsHandler } from "../../src/example/accounts.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import type { PreCheckMode } from "../../src/inbox/core.ts";
import { LocalBroker } from "../../src/localbroker/broker.ts";
import { defaultConfig, queueDefaults } from "../../src/localbroker/config.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { createPublisher, type Publisher, type PublishEvent } from "../../src/servicebus/publisher.ts";
import { createWorker, type Worker } from "../../src/worker/worker.ts";
import { perMessage, type DelayProxy } from "./proxy.ts";

const env = process.env;
const onlyFlag = process.argv.indexOf("--only");
/**
 * One part alone: `--only memory`, `--only cpu` (`sbinbox worker` processes and the floor), `--only publisher`,
 * `--only relay`, `--only remote` (the 1 ms rows), `--only ledger` (bench/e2e/ledger.ts), `--only worker` (the worker's tables, CPU and memory, without the
 * publisher and relay parts), or `--only e2e8` / `--only batch8` for a profile (also SBINBOX_BENCH_ONLY).
 */
export const ONLY = env.SBINBOX_BENCH_ONLY ?? (onlyFlag >= 0 ? process.argv[onlyFlag + 1] : undefined) ?? "";
/** The worker's pre-check mode (SBINBOX_PRECHECK's values); the worker's default unless set. */
export const PRECHECK = ((): PreCheckMode => {
  const v = env.SBINBOX_BENCH_PRECHECK ?? "redeliveries";
  return v === "redeliveries" ? v : v === "true";
})();
export const MESSAGES = Number(env.SBINBOX_BENCH_MESSAGES ?? 2000);
export const BACKLOG = Number(env.SBINBOX_BENCH_BACKLOG ?? 50_000);
/** Messages each `sbinbox worker` CPU run and each floor loop drains. */
export const CPU_MESSAGES = Number(env.SBINBOX_BENCH_CPU_MESSAGES ?? 10_000);
export const CONCURRENCY = (env.SBINBOX_BENCH_CONCURRENCY ?? "1,8,32").split(",").map(Number);
export const ROUNDS = Number(env.SBINBOX_BENCH_ROUNDS ?? 3);
/** The added delay of the remote rows, each way (0.5 ms: a 1 ms round trip, a database in the same region). */
export const REMOTE_DELAY_MS = Number(env.SBINBOX_BENCH_REMOTE_DELAY_MS ?? 0.5);
/** `code` (the example's transactional handler) or `statements` (the same change as statements-as-data). */
export const HANDLER_KIND = env.SBINBOX_BENCH_HANDLER ?? "code";
if (HANDLER_KIND !== "code" && HANDLER_KIND !== "statements") {
  throw new Error(`SBINBOX_BENCH_HANDLER must be "code" or "statements", not "${HANDLER_KIND}"`);
}
/** Batch transactions at once in the batched rows (SBINBOX_BATCH_MAX_IN_FLIGHT); unset: the worker's default. */
export const BATCH_IN_FLIGHT = Number(env.SBINBOX_BENCH_BATCH_IN_FLIGHT ?? 0) || undefined;
/** The batched rows' SBINBOX_BATCH_SIZE at concurrency c (default c / 2: the next batch fills while one runs). */
export const batchSizeAt = (c: number): number =>
  Number(env.SBINBOX_BENCH_BATCH_SIZE ?? 0) || Math.max(1, Math.floor(c / 2));
export const BATCH_WAIT_MS = Number(env.SBINBOX_BENCH_BATCH_WAIT_MS ?? 0);
export const QUEUE = "bench";
export const RSS_QUEUE = "rss";
export const CONSUMER = "bench";

export type Counts = { active: number; locked: number };

/** Child mode: the broker in its own process (as in production, it is not the worker's CPU). */
export async function serveBroker(): Promise<void> {
  const config = defaultConfig();
  // Duplicate detection off: the duplicate-path rows resend ids on purpose, and must reach the worker.
  const settings = { ...queueDefaults, requiresDuplicateDetection: false, lockDurationMs: 60_000 };
  config.queues = [
    { ...settings, name: QUEUE },
    { ...settings, name: RSS_QUEUE },
  ];
  const broker = await LocalBroker.start({ port: 0, config });
  process.on("message", (request: { counts?: string; stop?: boolean }) => {
    if (request.counts) process.send?.(broker.counts(request.counts));
    if (request.stop) void broker.stop().then(() => process.exit(0));
  });
  process.send?.({ connectionString: broker.connectionString });
}

export function ask<T>(child: ChildProcess, request: object): Promise<T> {
  return new Promise((resolve) => {
    child.once("message", (reply) => resolve(reply as T));
    child.send(request);
  });
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface Harness {
  readonly client: ServiceBusClient;
  readonly publisher: Publisher;
  readonly db: Database;
  /** The database straight, for the bench's own set-up; the measured paths use `url`. */
  readonly directUrl: string;
  /** The database through the proxy. */
  readonly url: string;
  readonly proxy: DelayProxy;
  readonly broker: ChildProcess;
  readonly connectionString: string;
}

let serial = 0;
/** `n` new example events (credits to 50 accounts), unique across the whole run. */
export function freshEvents(n: number): PublishEvent[] {
  const run = `b${++serial}`;
  return Array.from({ length: n }, (_, i) => demoEvent(run, i));
}

export async function prefill(h: Harness, events: readonly PublishEvent[], queue = QUEUE): Promise<void> {
  const publisher = queue === QUEUE ? h.publisher : createPublisher({ client: h.client, queue });
  for (let i = 0; i < events.length; i += 100) await publisher.publishBatch(events.slice(i, i + 100));
  if (publisher !== h.publisher) await publisher.close();
}

function benchHandler(): MessageHandler {
  // The example's credit, as code or as statements-as-data: the same two statements, keyed by the account.
  return HANDLER_KIND === "code" ? accountCreditedHandler() : accountCreditedStatementsHandler();
}

/** Starts the worker as `sbinbox worker` composes it, at concurrency `c`, on a pool of c + 4 like the app. */
export async function startWorker(
  h: Harness,
  c: number,
  onOutcome: (id: string, kind: string) => void,
  batchSize = 1,
  preCheck: PreCheckMode = PRECHECK,
): Promise<{ worker: Worker; db: Database }> {
  const db = await openDatabase({ kind: "postgres", url: h.url }, { preCheck, maxConnections: c + 4 });
  const worker = createWorker({
    client: h.client,
    store: db.store,
    handlers: [benchHandler()],
    queue: QUEUE,
    consumer: CONSUMER,
    maxConcurrentCalls: c,
    batchSize,
    batchWaitMs: BATCH_WAIT_MS,
    batchMaxInFlight: BATCH_IN_FLIGHT,
    sweepIntervalMs: 0,
    // Each message's decision, whatever the handler's kind or the path (single, batch) that decided it.
    beforeSettle: (message, decision) => onOutcome(String(message.messageId), decision.outcome),
  });
  worker.start();
  return { worker, db };
}

export async function stopWorker(w: { worker: Worker; db: Database }): Promise<void> {
  await w.worker.stop();
  await w.db.close();
}

export async function settledQueue(h: Harness, queue = QUEUE): Promise<void> {
  for (;;) {
    const c = await ask<Counts>(h.broker, { counts: queue });
    if (c.active + c.locked === 0) return;
    await sleep(20);
  }
}

export interface Drain {
  /** msgs/s from the first outcome to the last (attaching the link not counted). */
  readonly rate: number;
  /** The bench process's CPU (user + system) per message over the same span: the in-process worker's. */
  readonly cpuUs: number;
  /** Database round trips and commits per message, counted by the proxy over the whole drain. */
  readonly roundTrips: number;
  readonly commits: number;
}

/** A backlog drained by the worker, counting `kind` outcomes. */
export async function drainWithWorker(
  h: Harness,
  c: number,
  events: readonly PublishEvent[],
  kind: string,
  batchSize = 1,
): Promise<Drain> {
  // The duplicates here are sent afresh (delivery count 0), as a resend past the duplicate window would be; the
  // duplicate rows stand for redeliveries, so their worker reads first, as it does for every redelivery.
  const preCheck = kind === "duplicate" ? true : PRECHECK;
  await prefill(h, events);
  const before = await h.proxy.counts();
  let done = 0;
  let first = 0;
  let firstCpu = process.cpuUsage();
  let finished!: () => void;
  const all = new Promise<void>((resolve) => (finished = resolve));
  let other = "";
  const w = await startWorker(
    h,
    c,
    (_, k) => {
      if (k !== kind) {
        other ||= k;
        return;
      }
      if (done === 0) {
        first = performance.now();
        firstCpu = process.cpuUsage();
      }
      done += 1;
      if (done === events.length) finished();
    },
    batchSize,
    preCheck,
  );
  const timeout = setTimeout(() => finished(), 600_000);
  await all;
  clearTimeout(timeout);
  const cpu = process.cpuUsage(firstCpu);
  const rate = (events.length - 1) / ((performance.now() - first) / 1000);
  if (done < events.length)
    throw new Error(`bench: ${done} of ${events.length} ${kind} (first other: ${other})`);
  await stopWorker(w);
  await settledQueue(h);
  const counts = perMessage(before, await h.proxy.counts(), events.length);
  return { rate, cpuUs: (cpu.user + cpu.system) / (events.length - 1), ...counts };
}

export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

/** Latency publisher -> committed effect, publishing at `rate` msgs/s in small batches while the worker runs. */
export async function latency(
  h: Harness,
  c: number,
  rate: number,
  batchSize = 1,
): Promise<{ p50: number; p99: number }> {
  const count = Math.max(200, Math.min(3000, Math.round(rate * 6)));
  const events = freshEvents(count);
  const sentAt = new Map<string, number>();
  const latencies: number[] = [];
  let finished!: () => void;
  const all = new Promise<void>((resolve) => (finished = resolve));
  const w = await startWorker(
    h,
    c,
    (id, kind) => {
      const t = sentAt.get(id);
      if (kind === "committed" && t !== undefined) latencies.push(performance.now() - t);
      if (latencies.length >= events.length) finished();
    },
    batchSize,
  );
  // Its own connection, as an upstream service would have: the publisher's sends do not queue behind the receiver.
  const client = new ServiceBusClient(h.connectionString);
  const publisher = createPublisher({ client, queue: QUEUE });
  await publisher.publishBatch(freshEvents(1)); // opens the send link outside the samples
  await sleep(300); // the receive link attaches
  const tickMs = 20;
  const perTick = Math.max(1, Math.round((rate * tickMs) / 1000));
  const started = performance.now();
  for (let i = 0; i < events.length; i += perTick) {
    const due = started + (i / perTick) * tickMs;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    const batch = events.slice(i, i + perTick);
    const now = performance.now();
    for (const e of batch) sentAt.set(deriveMessageId(e.type, e.key), now);
    await publisher.publishBatch(batch);
  }
  await all;
  await stopWorker(w);
  await publisher.close();
  await client.close();
  const sorted = latencies.sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}
