// `npm run chaos [-- --events N]`: exactly-once under faults. The local broker and an embedded PostgreSQL in this
// process, three `sbinbox worker` processes competing on one queue, N distinct events of which 10% are sent twice
// (half inside the broker's duplicate window, half after it, so those reach the inbox), a worker SIGKILLed every
// few seconds and restarted, the database stopped and started once mid-run, handlers failing transiently, poison.
// At the end the business tables, the inbox and the broker's queues are compared with what was sent.
// Exit 0 only if nothing is lost, nothing is doubled and only the poison is dead-lettered. The last line is
// RESULT distinct=.. effects=.. lost=.. doubled=.. deadlettered=.. poison=.. kills=.. db_restarts=..
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { balancesMatch } from "../src/app/demo.ts";
import { localWorkerEnv, startLocalStack } from "../src/app/local-stack.ts";
import { accountSql } from "../src/example/accounts.ts";
import { demoEvent } from "../src/example/demo-events.ts";
import { createServiceBusClient } from "../src/servicebus/client.ts";
import { deriveMessageId } from "../src/servicebus/message-id.ts";
import { createPublisher, type PublishEvent } from "../src/servicebus/publisher.ts";
import { sendRawMessages, type RawMessage } from "../src/servicebus/raw.ts";
import { WorkerFleet } from "./chaos-fleet.ts";

const QUEUE = "chaos";
const CONSUMER = "sbinbox-chaos";
const WORKERS = 3;
/**
 * Queue timings. A SIGKILLed worker's messages come back when their 5 s lock expires, each kill costing them one
 * delivery; an outage costs a message at most one abandon (the worker pauses at the first "unavailable") and one
 * expired lock (held messages go back when the paused link closes); a failOnce message fails once per process
 * that sees it. MaxDeliveryCount 10 leaves room for all of that together, so only poison reaches the DLQ.
 */
const LOCK_MS = 5_000;
const MAX_DELIVERY_COUNT = 10;
/** Azure's smallest duplicate detection window: late resends wait it out and reach the inbox. */
const DUPLICATE_WINDOW_MS = 20_000;
const MAX_MESSAGE_BYTES = 65_536;
const BATCH = 100;

const usage = `usage: npm run chaos -- [--events N] [--kill-every-ms MS] [--db-down-ms MS] [--timeout S] [--seed N]

Exactly-once under faults: 3 worker processes, N distinct events (default 20000), 10% resent, a worker SIGKILLed
every few seconds and restarted, the database stopped and started once, transient handler failures, poison.
Exit code 0 only if nothing is lost, nothing is doubled and only the poison is dead-lettered.
`;

interface Options {
  events: number;
  killEveryMs: number;
  dbDownMs: number;
  timeoutMs: number;
  seed: number;
}

function options(argv: string[]): Options | string {
  let values;
  try {
    values = parseArgs({
      args: argv,
      options: {
        events: { type: "string", default: "20000" },
        "kill-every-ms": { type: "string", default: "3000" },
        "db-down-ms": { type: "string", default: "10000" },
        timeout: { type: "string", default: "570" },
        seed: { type: "string", default: String(Date.now() % 1_000_000) },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (error) {
    return (error as Error).message;
  }
  if (values.help) return "";
  const o = {
    events: Number(values.events),
    killEveryMs: Number(values["kill-every-ms"]),
    dbDownMs: Number(values["db-down-ms"]),
    timeoutMs: Number(values.timeout) * 1000,
    seed: Number(values.seed),
  };
  if (!Number.isInteger(o.events) || o.events < 100) return "--events must be a whole number of at least 100";
  if (!(o.killEveryMs >= 500)) return "--kill-every-ms must be at least 500";
  if (!(o.dbDownMs >= 0)) return "--db-down-ms must be a number of milliseconds";
  if (!(o.timeoutMs > 0)) return "--timeout must be a positive number of seconds";
  if (!Number.isInteger(o.seed)) return "--seed must be a whole number";
  return o;
}

/** mulberry32: a seeded generator, so a failing run's kill schedule can be replayed with --seed. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function poisonMessages(runId: string): (RawMessage & { reason: string })[] {
  return [
    {
      messageId: `poison-json-${runId}`,
      subject: "AccountCredited",
      contentType: "application/json",
      body: Buffer.from("{not json"),
      reason: "UndecodableBody",
    },
    {
      messageId: `poison-type-${runId}`,
      subject: "AccountDebited",
      body: Buffer.from('{"accountId":"acc-1","amount":1}'),
      reason: "UnknownMessageType",
    },
    {
      messageId: `poison-schema-${runId}`,
      subject: "AccountCredited",
      body: Buffer.from('{"accountId":"acc-1","amount":-5}'),
      reason: "SchemaViolation",
    },
    {
      messageId: `poison-size-${runId}`,
      subject: "AccountCredited",
      body: Buffer.from(JSON.stringify({ accountId: "acc-1", amount: 1, reference: "x".repeat(70_000) })),
      reason: "MessageTooLarge",
    },
    {
      messageId: `poison-utf8-${runId}`,
      subject: "AccountCredited",
      body: Buffer.from([0x7b, 0xff, 0xfe, 0x7d]),
      reason: "UndecodableBody",
    },
  ];
}

async function main(o: Options): Promise<number> {
  const started = Date.now();
  const random = seeded(o.seed);
  const out = (line: string) =>
    process.stdout.write(`[${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s] ${line}\n`);
  const cleanups: (() => Promise<void>)[] = [];
  let fleet: WorkerFleet | undefined;
  const killAll = () => fleet?.killAll();
  process.once("exit", killAll);
  try {
    out(
      `chaos run: ${o.events} events, seed ${o.seed}; starting the local broker and an embedded PostgreSQL`,
    );
    const stack = await startLocalStack(
      {
        queue: {
          name: QUEUE,
          lockDurationMs: LOCK_MS,
          maxDeliveryCount: MAX_DELIVERY_COUNT,
          duplicateDetectionWindowMs: DUPLICATE_WINDOW_MS,
        },
        database: "sbinbox_chaos",
        maxConnections: 2,
      },
      cleanups,
    );
    const { broker, postgres: pg, db } = stack;

    const runId = randomUUID().slice(0, 8);
    const events: PublishEvent[] = Array.from({ length: o.events }, (_, i) => {
      const e = demoEvent(runId, i);
      // 2% of the handlers fail once in each process that sees them, as a flaky dependency would.
      return i % 50 === 25 ? { ...e, body: { ...(e.body as object), failOnce: true } } : e;
    });
    const ids = events.map((e) => deriveMessageId(e.type, e.key));
    const expected = new Set(ids);
    const poison = poisonMessages(runId);

    // Outage bookkeeping: restarts wait while the database is down; a start-up that overlapped it may fail.
    const outages: { from: number; to: number }[] = [];
    let dbUp = true;
    fleet = new WorkerFleet({
      size: WORKERS,
      env: {
        ...localWorkerEnv(stack, CONSUMER),
        SBINBOX_MAX_MESSAGE_BYTES: String(MAX_MESSAGE_BYTES),
        SBINBOX_OUTAGE_BACKOFF_MIN_MS: "250",
        SBINBOX_OUTAGE_BACKOFF_MAX_MS: "2000",
      },
      // The first generation also carries the kill-between-commit-and-complete switch for one early event, so
      // that exact moment is hit for certain (unless its worker was already killed), not only by chance.
      firstGeneration: () => ({ SBINBOX_FAULT_KILL_AFTER_COMMIT: ids[Math.floor(o.events * 0.03)]! }),
      databaseUp: () => dbUp,
      // A margin after the restart: a start-up that began during the outage may report its failure a bit later.
      databaseWasDownBetween: (from, to) => outages.some((x) => x.from <= to && x.to + 2_000 >= from),
      log: out,
    });
    await fleet.start();
    out(`${WORKERS} worker processes started (pids ${fleet.pids.join(", ")})`);

    const client = createServiceBusClient({ connectionString: broker.connectionString });
    cleanups.push(() => client.close());
    const publisher = createPublisher({ client, queue: QUEUE });
    cleanups.push(() => publisher.close());

    // Publishing runs beside everything else: batches of 100, then the early resends of the batch (the lost
    // acknowledgement case), poison spread through the run, and the late resends once the window has passed.
    let published = 0;
    let earlyResends = 0;
    let lateResends = 0;
    let lateDone = false;
    const publishing = (async () => {
      const late: { event: PublishEvent; at: number }[] = [];
      // Poison spread through the run, each with a batch boundary of its own.
      const poisonAt = poison.map((_, k) => Math.floor((k * events.length) / poison.length / BATCH) * BATCH);
      for (let i = 0; i < events.length; i += BATCH) {
        const batch = events.slice(i, i + BATCH);
        await publisher.publishBatch(batch);
        const sentAt = Date.now();
        published += batch.length;
        const early = batch.filter((_, j) => (i + j) % 20 === 0);
        if (early.length > 0) await publisher.publishBatch(early);
        earlyResends += early.length;
        for (const [j, event] of batch.entries()) if ((i + j) % 20 === 10) late.push({ event, at: sentAt });
        const due = poison.filter((_, k) => poisonAt[k] === i);
        if (due.length > 0) await sendRawMessages(client, QUEUE, due);
      }
      out(
        `published ${published} events and ${earlyResends} early resends; ${poison.length} poison messages`,
      );
      for (let k = 0; k < late.length; k += BATCH) {
        const chunk = late.slice(k, k + BATCH);
        const wait = chunk.at(-1)!.at + DUPLICATE_WINDOW_MS + 2_000 - Date.now();
        if (wait > 0) await sleep(wait);
        await publisher.publishBatch(chunk.map((x) => x.event));
        lateResends += chunk.length;
      }
      out(`published ${lateResends} late resends (after the duplicate window)`);
      lateDone = true;
    })();
    let publishError: Error | undefined;
    publishing.catch(
      (error: unknown) =>
        (publishError = error instanceof Error ? error : new Error("publishing failed", { cause: error })),
    );

    // The killer: one random worker every few seconds, from the start until everything is applied.
    let killing = true;
    const killer = (async () => {
      while (killing) {
        await sleep(o.killEveryMs * (0.5 + random()));
        if (!killing) break;
        const victim = fleet.killOne(random);
        if (victim) out(`SIGKILL ${victim}`);
      }
    })();

    // Watch: progress, the one database outage at 40%, the end condition.
    let applied = 0;
    let dbRestarts = 0;
    let lastLine = 0;
    const deadline = started + o.timeoutMs;
    let timedOut = false;
    for (;;) {
      try {
        if (dbUp)
          applied = await scalar(db.sql, "SELECT count(DISTINCT message_id)::int AS n FROM example_credits");
      } catch {
        // The count is best effort while the server restarts.
      }
      await fleet.restartPending();
      if (dbRestarts === 0 && dbUp && applied >= o.events * 0.4) {
        out(`stopping the database for ${o.dbDownMs} ms (${applied} applied)`);
        outages.push({ from: Date.now(), to: Infinity });
        dbUp = false;
        await pg.stop();
        void sleep(o.dbDownMs).then(async () => {
          await pg.start();
          outages.at(-1)!.to = Date.now();
          dbUp = true;
          dbRestarts += 1;
          out("database started again");
        });
      }
      const c = broker.counts(QUEUE);
      if (Date.now() - lastLine >= 2_000) {
        lastLine = Date.now();
        out(
          `applied ${applied}/${o.events} | queue ${c.active} waiting, ${c.locked} locked, ${c.deadLettered} DLQ | ` +
            `workers ${fleet.live}, kills ${fleet.counts.kills}`,
        );
      }
      if (publishError) throw publishError;
      if (
        lateDone &&
        dbUp &&
        applied >= o.events &&
        c.active + c.locked + c.scheduled === 0 &&
        c.deadLettered >= poison.length
      )
        break;
      if (Date.now() > deadline) {
        timedOut = true;
        out(`TIMED OUT after ${o.timeoutMs / 1000} s`);
        break;
      }
      await sleep(250);
    }
    killing = false;
    await killer;
    await fleet.stop();
    const stats = fleet.readStats();
    await publishing.catch(() => undefined);

    // The comparison: business rows, inbox rows and the broker's queues against what was sent.
    const { rows } = await db.sql.query<{ messageId: string; n: number }>(
      accountSql.creditsPerMessage.postgres,
    );
    const perMessage = new Map(rows.map((r) => [r.messageId, Number(r.n)]));
    const effects = [...perMessage.values()].reduce((a, b) => a + b, 0);
    const lost = ids.filter((id) => !perMessage.has(id)).length;
    const doubled = [...perMessage.values()].filter((n) => n > 1).length;
    const unexpected = [...perMessage.keys()].filter((id) => !expected.has(id)).length;
    const balances = await balancesMatch(db.sql, events);
    const inbox = await db.sql.query<{ id: string; done: boolean }>(
      `SELECT "MessageId" AS id, "ProcessedUtc" IS NOT NULL AS done FROM "Inbox" WHERE "Consumer" = $1`,
      [CONSUMER],
    );
    const inboxDone = inbox.rows.filter((r) => r.done && expected.has(r.id)).length;
    const inboxStray = inbox.rows.filter((r) => !r.done || !expected.has(r.id)).length;
    const counts = broker.counts(QUEUE);
    const dlq = await deadLetters(client);
    const poisonReasons = new Map(poison.map((p) => [p.messageId, p.reason]));
    const wrongDeadLetters = dlq.filter((m) => poisonReasons.get(m.messageId) !== m.reason);

    out("");
    out("report");
    out(
      `  sent              ${o.events} distinct; ${earlyResends} early + ${lateResends} late resends; ${poison.length} poison`,
    );
    out(
      `  broker            dropped ${counts.duplicatesDropped} resends inside the window; ${counts.active} active, ${counts.locked} locked left`,
    );
    out(
      `  dead-lettered     ${counts.deadLettered}: ${dlq.map((m) => `${m.messageId.split("-")[1]}=${m.reason}`).join(", ")}`,
    );
    out(
      `  faults            ${fleet.counts.kills} SIGKILLs, ${dbRestarts} database restart(s), ${fleet.counts.failedStarts} start-ups refused during the outage`,
    );
    out(`  workers           ${fleet.counts.starts} processes started, ${fleet.counts.crashes} crashed`);
    for (const report of fleet.crashReports)
      out(`    crash: ${report.trim().split("\n").slice(-3).join(" | ")}`);
    out(`  inbox             ${inboxDone} processed markers for sent events, ${inboxStray} other rows`);
    out(
      `  worker counts     ${stats.duplicate} duplicates absorbed, ${stats.failed} transient failures (lower bounds)`,
    );
    out(
      `  effects           ${effects} credit rows; lost ${lost}, doubled ${doubled}, unexpected ${unexpected}`,
    );
    out(`  balances          ${balances ? "match the events" : "DO NOT match the events"}`);
    const ok =
      !timedOut &&
      lost === 0 &&
      doubled === 0 &&
      unexpected === 0 &&
      effects === o.events &&
      balances &&
      inboxDone === o.events &&
      inboxStray === 0 &&
      counts.active + counts.locked + counts.scheduled === 0 &&
      counts.deadLettered === poison.length &&
      dlq.length === poison.length &&
      wrongDeadLetters.length === 0 &&
      fleet.counts.crashes === 0 &&
      dbRestarts === 1;
    out(
      `  verdict           ${ok ? "exactly once: it holds" : "FAILED"}; took ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    process.stdout.write(
      `RESULT distinct=${o.events} effects=${effects} lost=${lost} doubled=${doubled} ` +
        `deadlettered=${counts.deadLettered} poison=${poison.length} kills=${fleet.counts.kills} db_restarts=${dbRestarts}\n`,
    );
    return ok ? 0 : 1;
  } finally {
    killAll();
    process.removeListener("exit", killAll);
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  }
}

async function scalar(
  sql: { query<R>(text: string): Promise<{ rows: R[] }> },
  text: string,
): Promise<number> {
  const { rows } = await sql.query<{ n: number }>(text);
  return Number(rows[0]?.n ?? 0);
}

/** The dead-letter queue as the SDK sees it: each message's id and DeadLetterReason. */
async function deadLetters(
  client: ReturnType<typeof createServiceBusClient>,
): Promise<{ messageId: string; reason: string | undefined }[]> {
  const receiver = client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
  try {
    const messages = await receiver.peekMessages(1000);
    return messages.map((m) => ({ messageId: String(m.messageId), reason: m.deadLetterReason }));
  } finally {
    await receiver.close();
  }
}

const parsed = options(process.argv.slice(2));
if (typeof parsed === "string") {
  if (parsed === "") process.stdout.write(usage);
  else process.stderr.write(`chaos: ${parsed}\n\n${usage}`);
  process.exitCode = parsed === "" ? 0 : 2;
} else {
  const code = await main(parsed);
  // Sockets of the in-process broker close asynchronously; a backstop so nothing lingering delays the exit.
  setTimeout(() => process.exit(code), 2_000).unref();
  process.exitCode = code;
}
