// `npm run bench`: the worker end to end (publisher -> local broker -> worker -> committed effect in PostgreSQL)
// at maxConcurrentCalls 1, 8 and 32, set against its ceilings: the database (the worker's transaction as bare SQL
// in a loop, same concurrency), the broker (receive-and-complete through the SDK, no database), the naive
// check-then-insert handler of the seeds (no unique index) in the same receive loop, and the duplicate path alone.
// Then the outbox relay's rate beside the publisher's and its commit-to-effect latency (bench/relay.ts), and the
// resident memory of a `sbinbox worker` process draining a 50,000-message backlog.
// A benchmark, not a test: it prints a table and the ratios the targets are stated in.
import { fork, spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { ServiceBusClient, type ServiceBusReceivedMessage } from "@azure/service-bus";
import pg from "pg";
import { openDatabase, type Database } from "../src/app/database.ts";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { freePort } from "../src/embedded/free-port.ts";
import { accountCreditedHandler, accountSql } from "../src/example/accounts.ts";
import { exampleModule } from "../src/example/module.ts";
import { moduleMigrations } from "../src/app/handler-module.ts";
import { demoEvent } from "../src/example/demo-events.ts";
import type { PreCheckMode } from "../src/inbox/core.ts";
import type { InboxStore } from "../src/inbox/store.ts";
import { statements } from "../src/inbox/postgres/statements.ts";
import { formatTable, inBareTransaction } from "./common.ts";
import { relayBench } from "./relay.ts";
import { publisherBench } from "./publisher.ts";
import { LocalBroker } from "../src/localbroker/broker.ts";
import { defaultConfig, queueDefaults } from "../src/localbroker/config.ts";
import { deriveMessageId } from "../src/servicebus/message-id.ts";
import { createPublisher, type Publisher, type PublishEvent } from "../src/servicebus/publisher.ts";
import { createWorker, type Worker } from "../src/worker/worker.ts";
import { median } from "./median.ts";

const onlyFlag = process.argv.indexOf("--only");
/**
 * One part alone: `--only memory`, `--only publisher`, `--only worker` (the worker's table and memory, without the
 * publisher and relay parts), or `--only e2e8` / `--only batch8` for a profile (also SBINBOX_BENCH_ONLY).
 */
const ONLY = process.env.SBINBOX_BENCH_ONLY ?? (onlyFlag >= 0 ? process.argv[onlyFlag + 1] : undefined) ?? "";
/** The worker's pre-check mode (SBINBOX_PRECHECK's values); the worker's default unless set. */
const PRECHECK = ((): PreCheckMode => {
  const v = process.env.SBINBOX_BENCH_PRECHECK ?? "redeliveries";
  return v === "redeliveries" ? v : v === "true";
})();
const MESSAGES = Number(process.env.SBINBOX_BENCH_MESSAGES ?? 2000);
const BACKLOG = Number(process.env.SBINBOX_BENCH_BACKLOG ?? 50_000);
const CONCURRENCY = [1, 8, 32];
const ROUNDS = Number(process.env.SBINBOX_BENCH_ROUNDS ?? 3);
const QUEUE = "bench";
const RSS_QUEUE = "rss";
const CONSUMER = "bench";
/** The worker's entry; SBINBOX_BENCH_WORKER_BIN names another, e.g. a copy of bin/ and dist/ without src/. */
const BIN =
  process.env.SBINBOX_BENCH_WORKER_BIN ?? fileURLToPath(new URL("../bin/sbinbox.js", import.meta.url));
/**
 * The NODE_OPTIONS of the memory runs, comma-separated (an empty item is Node's defaults): by default Node's
 * defaults and the young-generation size `npm start` and App Service pass.
 */
/** The batched rows' SBINBOX_BATCH_SIZE at concurrency c (default c / 2: the next batch fills while one runs) and wait. */
const batchSizeAt = (c: number): number =>
  Number(process.env.SBINBOX_BENCH_BATCH_SIZE ?? 0) || Math.max(1, Math.floor(c / 2));
const BATCH_WAIT_MS = Number(process.env.SBINBOX_BENCH_BATCH_WAIT_MS ?? 2);
/** The memory runs' SBINBOX_BATCH_SIZE (1: one transaction per message). */
const MEMORY_BATCH = process.env.SBINBOX_BENCH_MEMORY_BATCH ?? "8";
const MEMORY_NODE_OPTIONS = (process.env.SBINBOX_BENCH_NODE_OPTIONS ?? ",--max-semi-space-size=4").split(",");
const NAIVE_TABLES = `
CREATE TABLE naive_inbox (id bigserial PRIMARY KEY, message_id varchar(128) NOT NULL,
  consumer varchar(200) NOT NULL, received_utc timestamptz NOT NULL DEFAULT now());
CREATE INDEX ix_naive_inbox ON naive_inbox (message_id, consumer);`;

type Counts = { active: number; locked: number };

/** Child mode: the broker in its own process (as in production, it is not the worker's CPU). */
async function serve(): Promise<void> {
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

function ask<T>(child: ChildProcess, request: object): Promise<T> {
  return new Promise((resolve) => {
    child.once("message", (reply) => resolve(reply as T));
    child.send(request);
  });
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The store as the worker uses it, reporting when each outcome is known (committed = the effect is durable). */
function observed(store: InboxStore, onOutcome: (messageId: string, kind: string) => void): InboxStore {
  return new Proxy(store, {
    get(target, prop) {
      if (prop === "process") {
        return async (...args: Parameters<InboxStore["process"]>) => {
          const outcome = await target.process(...args);
          onOutcome(args[0].messageId, outcome.kind);
          return outcome;
        };
      }
      if (prop === "processBatch") {
        // A batch's undecided messages come back `single` and go through `process`, observed there.
        return async (...args: Parameters<NonNullable<InboxStore["processBatch"]>>) => {
          const result = await target.processBatch!(...args);
          result.outcomes.forEach((o, i) => {
            if (o.kind !== "single") onOutcome(args[1][i]!.messageId, o.kind);
          });
          return result;
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

async function waitFor(condition: () => boolean, what: string, timeoutMs = 600_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`bench: timed out waiting for ${what}`);
    await sleep(2);
  }
}

interface Harness {
  readonly client: ServiceBusClient;
  readonly publisher: Publisher;
  readonly db: Database;
  readonly url: string;
  readonly broker: ChildProcess;
  readonly connectionString: string;
}

let serial = 0;
/** `n` new example events (credits to 50 accounts), unique across the whole run. */
function freshEvents(n: number): PublishEvent[] {
  const run = `b${++serial}`;
  return Array.from({ length: n }, (_, i) => demoEvent(run, i));
}

async function prefill(h: Harness, events: readonly PublishEvent[], queue = QUEUE): Promise<void> {
  const publisher = queue === QUEUE ? h.publisher : createPublisher({ client: h.client, queue });
  for (let i = 0; i < events.length; i += 100) await publisher.publishBatch(events.slice(i, i + 100));
  if (publisher !== h.publisher) await publisher.close();
}

/** Starts the worker as `sbinbox worker` composes it, at concurrency `c`, on a pool of c + 4 like the app. */
async function startWorker(
  h: Harness,
  c: number,
  onOutcome: (id: string, kind: string) => void,
  batchSize = 1,
  preCheck: PreCheckMode = PRECHECK,
): Promise<{ worker: Worker; db: Database }> {
  const db = await openDatabase({ kind: "postgres", url: h.url }, { preCheck, maxConnections: c + 4 });
  const worker = createWorker({
    client: h.client,
    store: observed(db.store, onOutcome),
    handlers: [accountCreditedHandler()],
    queue: QUEUE,
    consumer: CONSUMER,
    maxConcurrentCalls: c,
    batchSize,
    batchWaitMs: BATCH_WAIT_MS,
    batchMaxInFlight: Number(process.env.SBINBOX_BENCH_BATCH_IN_FLIGHT ?? 0) || undefined,
    sweepIntervalMs: 0,
  });
  worker.start();
  return { worker, db };
}

async function stopWorker(w: { worker: Worker; db: Database }): Promise<void> {
  await w.worker.stop();
  await w.db.close();
}

/** Messages per second for a backlog drained by the worker, counting `kind` outcomes, link attach excluded. */
async function drainWithWorker(
  h: Harness,
  c: number,
  events: readonly PublishEvent[],
  kind: string,
  batchSize = 1,
): Promise<number> {
  // The duplicates here are sent afresh (delivery count 0), as a resend past the duplicate window would be; the
  // duplicate rows stand for redeliveries, so their worker reads first, as it does for every redelivery.
  const preCheck = kind === "duplicate" ? true : PRECHECK;
  await prefill(h, events);
  let done = 0;
  let first = 0;
  const w = await startWorker(
    h,
    c,
    (_, k) => {
      if (k !== kind) return;
      if (done === 0) first = performance.now();
      done += 1;
    },
    batchSize,
    preCheck,
  );
  await waitFor(() => done >= events.length, `${events.length} ${kind}`);
  // Steady state: from the first outcome to the last, so attaching the link is not counted.
  const rate = (events.length - 1) / ((performance.now() - first) / 1000);
  await stopWorker(w);
  await settledQueue(h);
  return rate;
}

async function settledQueue(h: Harness): Promise<void> {
  for (;;) {
    const c = await ask<Counts>(h.broker, { counts: QUEUE });
    if (c.active + c.locked === 0) return;
    await sleep(20);
  }
}

/** Latency publisher -> committed effect, publishing at `rate` msgs/s in small batches while the worker runs. */
async function latency(
  h: Harness,
  c: number,
  rate: number,
  batchSize = 1,
): Promise<{ p50: number; p99: number }> {
  const count = Math.max(200, Math.min(3000, Math.round(rate * 6)));
  const events = freshEvents(count);
  const sentAt = new Map<string, number>();
  const latencies: number[] = [];
  const w = await startWorker(
    h,
    c,
    (id, kind) => {
      const t = sentAt.get(id);
      if (kind === "committed" && t !== undefined) latencies.push(performance.now() - t);
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
  await waitFor(() => latencies.length >= events.length, "every latency sample");
  await stopWorker(w);
  await publisher.close();
  await client.close();
  const sorted = latencies.sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

/**
 * The worker's transaction for a fresh message as bare SQL on a pool like the worker's: BEGIN sent with the marker
 * insert in one write (pg's pipeline mode, as the worker's pool does), the two effect statements, COMMIT: four
 * round trips, what the worker sends for this handler (a worker that also pipelined the handler's statements could
 * send fewer). `sixRoundTrips` is the
 * same before that change: a pre-check read, then BEGIN, marker, effect and COMMIT each in turn.
 */
async function databaseCeiling(h: Harness, c: number, count: number, sixRoundTrips = false): Promise<number> {
  const pool = new pg.Pool({ connectionString: h.url, max: c, pipeline: !sixRoundTrips });
  const events = freshEvents(count);
  const one = async (e: PublishEvent): Promise<void> => {
    const id = deriveMessageId(e.type, e.key);
    const body = e.body as { accountId: string; amount: number };
    if (sixRoundTrips) {
      const seen = await pool.query(statements.isProcessed, [id, CONSUMER]);
      if (seen.rows.length > 0) throw new Error("bench: unexpected duplicate");
      await inBareTransaction(pool, async (client) => {
        await client.query(statements.insertProcessedMarker, [id, CONSUMER]);
        await client.query(accountSql.insertCredit.postgres, [id, body.accountId, body.amount]);
        await client.query(accountSql.addToBalance.postgres, [body.accountId, body.amount]);
      });
      return;
    }
    const client = await pool.connect();
    try {
      await Promise.all([
        client.query("BEGIN"),
        client.query(statements.insertProcessedMarker, [id, CONSUMER]),
      ]);
      await client.query(accountSql.insertCredit.postgres, [id, body.accountId, body.amount]);
      await client.query(accountSql.addToBalance.postgres, [body.accountId, body.amount]);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
  };
  const rate = await lanes(c, events, one);
  await pool.end();
  return rate;
}

async function lanes<T>(c: number, items: readonly T[], op: (item: T) => Promise<void>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      for (let i = next++; i < items.length; i = next++) await op(items[i]!);
    }),
  );
  return items.length / ((performance.now() - started) / 1000);
}

/** Receive-and-complete through the SDK at `c`, with `handle` before each complete; msgs/s from the first delivery. */
async function receiveLoop(
  h: Harness,
  c: number,
  count: number,
  handle: (m: ServiceBusReceivedMessage) => Promise<void>,
): Promise<number> {
  await prefill(h, freshEvents(count));
  const receiver = h.client.createReceiver(QUEUE, { receiveMode: "peekLock", skipParsingBodyAsJson: true });
  let done = 0;
  let first = 0;
  const subscription = receiver.subscribe(
    {
      processMessage: async (m) => {
        first ||= performance.now();
        await handle(m);
        await receiver.completeMessage(m);
        done += 1;
      },
      processError: (args) => Promise.reject(args.error),
    },
    { autoCompleteMessages: false, maxConcurrentCalls: c },
  );
  await waitFor(() => done >= count, `${count} completed`);
  const rate = count / ((performance.now() - first) / 1000);
  await subscription.close();
  await receiver.close();
  await settledQueue(h);
  return rate;
}

/** The seeds' first handler: check the inbox, then insert marker and effect; no unique index to stop a race. */
async function naive(h: Harness, c: number, count: number): Promise<number> {
  const pool = new pg.Pool({ connectionString: h.url, max: c + 4 });
  const rate = await receiveLoop(h, c, count, async (m) => {
    const id = String(m.messageId);
    const body = JSON.parse(Buffer.from(m.body as Uint8Array).toString("utf8")) as {
      accountId: string;
      amount: number;
    };
    const seen = await pool.query("SELECT 1 FROM naive_inbox WHERE message_id = $1 AND consumer = $2", [
      id,
      "naive",
    ]);
    if (seen.rows.length > 0) return;
    await inBareTransaction(pool, async (client) => {
      await client.query(accountSql.insertCredit.postgres, [id, body.accountId, body.amount]);
      await client.query(accountSql.addToBalance.postgres, [body.accountId, body.amount]);
      await client.query("INSERT INTO naive_inbox (message_id, consumer) VALUES ($1, $2)", [id, "naive"]);
    });
  });
  await pool.end();
  return rate;
}

function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  return kb / 1024;
}

/** A `sbinbox worker` process draining a backlog; its RSS sampled from /proc every 500 ms. */
async function memory(h: Harness, connectionString: string, nodeOptions: string): Promise<string[]> {
  process.stdout.write(`memory: publishing a backlog of ${BACKLOG} messages ...\n`);
  await prefill(h, freshEvents(BACKLOG), RSS_QUEUE);
  const child = spawn(process.execPath, [BIN, "worker"], {
    env: {
      ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("SBINBOX_"))),
      SBINBOX_SERVICEBUS_CONNECTION_STRING: connectionString,
      SBINBOX_POSTGRES_URL: h.url,
      SBINBOX_QUEUE: RSS_QUEUE,
      SBINBOX_CONSUMER: "rss",
      SBINBOX_LOG_LEVEL: "error",
      SBINBOX_BATCH_SIZE: MEMORY_BATCH,
      SBINBOX_HTTP_HOST: "127.0.0.1",
      PORT: String(await freePort()),
      NODE_OPTIONS: nodeOptions,
    },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const samples: { done: number; rss: number; t: number }[] = [];
  const started = performance.now();
  try {
    for (;;) {
      await sleep(500);
      const c = await ask<Counts>(h.broker, { counts: RSS_QUEUE });
      const done = BACKLOG - c.active - c.locked;
      samples.push({ done, rss: rssMb(child.pid!), t: (performance.now() - started) / 1000 });
      if (c.active + c.locked === 0) break;
      if (child.exitCode !== null) throw new Error(`the worker exited with ${child.exitCode}`);
    }
  } finally {
    child.kill("SIGTERM");
    await new Promise((resolve) => child.once("exit", resolve));
  }
  const firstWorking = samples.find((s) => s.done > 0) ?? samples[0]!;
  const at = (fraction: number) => samples.find((s) => s.done >= BACKLOG * fraction) ?? samples.at(-1)!;
  const end = samples.at(-1)!;
  const max = Math.max(...samples.map((s) => s.rss));
  const line = (label: string, s: { done: number; rss: number; t: number }) =>
    `  ${label.padEnd(6)} ${s.rss.toFixed(1).padStart(6)} MB  after ${String(s.done).padStart(6)} messages, ${s.t.toFixed(1)} s`;
  const quarter = at(0.25);
  return [
    `memory: RSS of one sbinbox worker process (maxConcurrentCalls 16, batch size ${MEMORY_BATCH}, NODE_OPTIONS "${nodeOptions}") ` +
      `draining ${BACKLOG} messages` +
      ` (${(BACKLOG / end.t).toFixed(0)} msgs/s)` +
      (process.env.SBINBOX_BENCH_WORKER_BIN ? `, running ${BIN}` : ""),
    line("start", firstWorking),
    line("25%", quarter),
    line("50%", at(0.5)),
    line("75%", at(0.75)),
    line("end", end),
    `  max ${max.toFixed(1)} MB; end - 25%: ${(end.rss - quarter.rss).toFixed(1)} MB ` +
      `(target: <= 150 MB and not growing)`,
  ];
}

async function main(): Promise<void> {
  const load = loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
  process.stdout.write(
    `e2e benchmark: node ${process.version}, ${MESSAGES} messages per cell, load average ${load}\n`,
  );
  // The publisher's rows first, in processes of their own, before PostgreSQL and the worker load the machine.
  if (ONLY === "" || ONLY === "publisher") {
    process.stdout.write(["", ...(await publisherBench()), ""].join("\n"));
    if (ONLY === "publisher") return;
  }
  const server = await EmbeddedPostgresServer.create();
  const brokerChild = fork(fileURLToPath(import.meta.url), ["--serve"], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  try {
    const { connectionString } = await new Promise<{ connectionString: string }>((resolve) =>
      brokerChild.once("message", (m) => resolve(m as { connectionString: string })),
    );
    const url = await server.createDatabase("sbinbox_e2e");
    const db = await openDatabase({ kind: "postgres", url }, { preCheck: true, maxConnections: 4 });
    await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
    await db.sql.query(NAIVE_TABLES);
    const client = new ServiceBusClient(connectionString);
    const publisher = createPublisher({ client, queue: QUEUE });
    const h: Harness = { client, publisher, db, url, broker: brokerChild, connectionString };

    // Warm-up: links, pools, plans and the JIT, on every path once.
    if (ONLY !== "memory") await drainWithWorker(h, 8, freshEvents(500), "committed");
    if (ONLY !== "memory") {
      await databaseCeiling(h, 8, 500);
      await receiveLoop(h, 8, 500, () => Promise.resolve());
      await naive(h, 8, 500);
    }

    if (/^(e2e|batch)\d+$/.test(ONLY)) {
      // For a profile (node --cpu-prof): the worker's fresh path alone, at the given concurrency.
      const c = Number(/\d+$/.exec(ONLY)![0]);
      const fresh = freshEvents(MESSAGES);
      const b = ONLY.startsWith("batch") ? batchSizeAt(c) : 1;
      const rate = await drainWithWorker(h, c, fresh, "committed", b);
      const dup = await drainWithWorker(h, c, fresh, "duplicate", b);
      process.stdout.write(
        `at ${c}, batch ${b}: fresh ${rate.toFixed(0)} msgs/s, duplicate ${dup.toFixed(0)} msgs/s\n`,
      );
      return;
    }
    const rows: string[][] = [];
    const batchedRows: string[][] = [];
    const spread: string[] = [];
    const range = (xs: number[]) => `${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)}`;
    for (const c of ONLY === "memory" || ONLY === "relay" ? [] : CONCURRENCY) {
      process.stdout.write(`concurrency ${c} ...\n`);
      // The rows that the targets compare run in several rounds, taking turns, and the median is reported: the
      // machine is shared, and one noisy stretch should not decide a ratio.
      const b = batchSizeAt(c);
      const runs = {
        e2e: [] as number[],
        db: [] as number[],
        db6: [] as number[],
        naive: [] as number[],
        dup: [] as number[],
        batched: [] as number[],
        batchedDup: [] as number[],
      };
      for (let round = 0; round < ROUNDS; round += 1) {
        const steps = [
          async () => {
            const fresh = freshEvents(MESSAGES);
            runs.e2e.push(await drainWithWorker(h, c, fresh, "committed"));
            runs.dup.push(await drainWithWorker(h, c, fresh, "duplicate"));
          },
          async () => {
            const fresh = freshEvents(MESSAGES);
            runs.batched.push(await drainWithWorker(h, c, fresh, "committed", b));
            runs.batchedDup.push(await drainWithWorker(h, c, fresh, "duplicate", b));
          },
          async () => void runs.db.push(await databaseCeiling(h, c, MESSAGES)),
          async () => void runs.db6.push(await databaseCeiling(h, c, MESSAGES, true)),
          async () => void runs.naive.push(await naive(h, c, MESSAGES)),
        ];
        for (const step of round % 2 === 0 ? steps : steps.reverse()) await step();
      }
      const [e2e, dbCeiling, naiveRate, duplicate, batched, batchedDup] = [
        runs.e2e,
        runs.db,
        runs.naive,
        runs.dup,
        runs.batched,
        runs.batchedDup,
      ].map(median) as [number, number, number, number, number, number];
      spread.push(
        `  conc ${c}: e2e ${range(runs.e2e)}, batched ${range(runs.batched)}, db ${range(runs.db)}, ` +
          `db6 ${range(runs.db6)}, ` +
          `naive ${range(runs.naive)}, dup ${range(runs.dup)}, batched dup ${range(runs.batchedDup)}`,
      );
      const lat = await latency(h, c, e2e * 0.3);
      // At 30% of the single path's rate, so both rows carry the same load.
      const batchedLat = await latency(h, c, e2e * 0.3, b);
      batchedRows.push([
        String(c),
        String(b),
        batched.toFixed(0),
        batchedLat.p50.toFixed(1),
        batchedLat.p99.toFixed(1),
        batchedDup.toFixed(0),
        (batched / dbCeiling).toFixed(2),
        (batched / naiveRate).toFixed(2),
        (batched / e2e).toFixed(2),
        (batchedLat.p99 / lat.p99).toFixed(2),
        (batchedDup / batched).toFixed(2),
      ]);
      const brokerCeiling = await receiveLoop(h, c, MESSAGES, () => Promise.resolve());
      rows.push([
        String(c),
        e2e.toFixed(0),
        lat.p50.toFixed(1),
        lat.p99.toFixed(1),
        dbCeiling.toFixed(0),
        median(runs.db6).toFixed(0),
        brokerCeiling.toFixed(0),
        naiveRate.toFixed(0),
        duplicate.toFixed(0),
        (e2e / dbCeiling).toFixed(2),
        (e2e / median(runs.db6)).toFixed(2),
        (e2e / naiveRate).toFixed(2),
        (duplicate / e2e).toFixed(2),
        (e2e / brokerCeiling).toFixed(2),
      ]);
    }
    const header = [
      "conc",
      "e2e/s",
      "p50 ms",
      "p99 ms",
      "db ceil/s",
      "db6 ceil/s",
      "broker ceil/s",
      "naive/s",
      "dup/s",
      "e2e/db",
      "e2e/db6",
      "e2e/naive",
      "dup/e2e",
      "e2e/broker",
    ];
    const table = formatTable(header, rows);
    // V8's defaults let the heap grow lazily while far below its limit; the second run uses the smaller young
    // generation `npm start` passes (no old-space cap), which shows whether the growth is garbage not yet
    // collected (flat) or memory held (it would keep growing).
    const memoryLines: string[] = [];
    // The outbox relay beside the publisher (bench/relay.ts), on the same embedded server.
    if (ONLY === "" || ONLY === "relay") memoryLines.push(...(await relayBench(server)));
    for (const nodeOptions of ONLY === "relay" ? [] : MEMORY_NODE_OPTIONS) {
      memoryLines.push(...(await memory(h, connectionString, nodeOptions)));
    }
    process.stdout.write(
      [
        "",
        `end to end: publisher -> local broker (own process) -> worker -> committed effect in embedded PostgreSQL`,
        `msgs/s: draining a prefilled backlog of ${MESSAGES}, median of ${ROUNDS} rounds (e2e, db, db6, naive, ` +
          `dup); pre-check ${String(PRECHECK)}; latency: publishing at 30% of the e2e rate, publisher to commit; ` +
          `db = BEGIN with the marker in one write, effect, COMMIT (4 round trips); db6 = pre-check, BEGIN, ` +
          `marker, effect, COMMIT one by one (6); dup = duplicates read for first, as every redelivery is`,
        ...table,
        "targets: e2e/db >= 0.90; e2e/naive >= 1.00; dup/e2e >= 3.00",
        "",
        `batched (group commit, SBINBOX_BATCH_SIZE as given, SBINBOX_BATCH_WAIT_MS ${BATCH_WAIT_MS}); ` +
          `ratios against the per-message rows above; latency at the same load (30% of the single e2e rate)`,
        ...formatTable(
          [
            "conc",
            "batch",
            "batched/s",
            "p50 ms",
            "p99 ms",
            "dup/s",
            "b/db",
            "b/naive",
            "b/e2e",
            "p99 b/e2e",
            "dup/b",
          ],
          batchedRows,
        ),
        "targets: b/db >= 1.50 at 32 and >= 1.00 at 8; b/naive >= 2.00 at 8 and 32; p99 b/e2e <= 2.00",
        `spread over ${ROUNDS} rounds (min-max msgs/s):`,
        ...spread,
        "",
        ...memoryLines,
        `load average at the end ${loadavg()
          .map((l) => l.toFixed(2))
          .join(" ")}`,
        "",
      ].join("\n"),
    );
    await publisher.close();
    await client.close();
    await db.close();
  } finally {
    brokerChild.send({ stop: true });
    await server.dispose();
  }
}

if (process.argv.includes("--serve")) await serve();
else await main();
