// `npm run chaos [-- --events N]`: exactly-once under faults. The local broker and an embedded PostgreSQL in this
// process, three `sbinbox worker` processes competing on one queue, N distinct events of which 10% are sent twice
// (half inside the broker's duplicate window, half after it, so those reach the inbox), a worker SIGKILLed every
// few seconds and restarted, the database stopped and started once mid-run, then refusing logins for a few seconds,
// then silent (a TCP proxy between the workers and PostgreSQL stops forwarding without closing), handlers failing
// transiently (once per process, or for their first attempts in every process, retried in place and by scheduled
// copies), poison. Upstream, N/10 transfers commit with their outbox rows (every 10th rolls back) and two
// `sbinbox relay` processes, SIGKILLed now and then, send them. At the end the business tables, the inbox and the
// broker's queues are compared with what was sent, and the upstream database's rows with the downstream effects.
// Exit 0 only if nothing is lost, nothing is doubled and only the poison is dead-lettered. The last line is
// RESULT distinct=.. effects=.. lost=.. doubled=.. deadlettered=.. poison=.. kills=.. db_restarts=.. logins_refused=..
// db_silent=..
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import pg from "pg";
import { balancesMatch, withoutSbinboxSettings } from "../src/app/demo.ts";
import { startUpstream } from "../src/app/demo-upstream.ts";
import { localWorkerEnv, startLocalStack } from "../src/app/local-stack.ts";
import { accountSql } from "../src/example/accounts.ts";
import { demoEvent } from "../src/example/demo-events.ts";
import { createServiceBusClient } from "../src/servicebus/client.ts";
import { deriveMessageId } from "../src/servicebus/message-id.ts";
import { createPublisher, type PublishEvent } from "../src/servicebus/publisher.ts";
import { sendRawMessages, type RawMessage } from "../src/servicebus/raw.ts";
import { StallProxy } from "../test/helpers/stall-proxy.ts";
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

/** The workers' database timeouts: short, so the silent phase pauses them within a few seconds. */
const WORKER_DB_TIMEOUTS = {
  SBINBOX_DB_CONNECT_TIMEOUT_MS: "2000",
  SBINBOX_DB_STATEMENT_TIMEOUT_MS: "2000",
  SBINBOX_DB_PROBE_TIMEOUT_MS: "1000",
};

const usage = `usage: npm run chaos -- [--events N] [--kill-every-ms MS] [--db-down-ms MS] [--logins-refused-ms MS]
                         [--db-silent-ms MS] [--timeout S] [--seed N]

Exactly-once under faults: 3 worker processes, N distinct events (default 20000), 10% resent, a worker SIGKILLed
every few seconds and restarted, the database stopped and started once, then refusing logins (ALTER ROLE ...
NOLOGIN, sessions ended), then silent (a proxy stops forwarding without closing), transient handler failures, poison;
upstream, N/10 outbox transactions (10% rolled back) sent by two relay processes that are SIGKILLed now and then.
Exit code 0 only if nothing is lost, nothing is doubled and only the poison is dead-lettered.
`;

interface Options {
  events: number;
  killEveryMs: number;
  dbDownMs: number;
  loginsRefusedMs: number;
  dbSilentMs: number;
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
        "logins-refused-ms": { type: "string", default: "4000" },
        "db-silent-ms": { type: "string", default: "5000" },
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
    loginsRefusedMs: Number(values["logins-refused-ms"]),
    dbSilentMs: Number(values["db-silent-ms"]),
    timeoutMs: Number(values.timeout) * 1000,
    seed: Number(values.seed),
  };
  if (!Number.isInteger(o.events) || o.events < 100) return "--events must be a whole number of at least 100";
  if (!(o.killEveryMs >= 500)) return "--kill-every-ms must be at least 500";
  if (!(o.dbDownMs >= 0)) return "--db-down-ms must be a number of milliseconds";
  if (!(o.loginsRefusedMs >= 0)) return "--logins-refused-ms must be a number of milliseconds";
  if (!(o.dbSilentMs >= 0)) return "--db-silent-ms must be a number of milliseconds";
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
    const { broker, postgres, db } = stack;
    // The workers reach PostgreSQL through a proxy that can go silent; this process's own connections do not.
    const proxy = await StallProxy.start(postgres.port);
    cleanups.push(() => proxy.close());
    const proxiedUrl = new URL(stack.url);
    proxiedUrl.port = String(proxy.port);
    // A session of its own for ALTER ROLE: kept open while logins are refused, so it can give them back.
    const admin = new pg.Client({ connectionString: stack.url });
    admin.on("error", () => undefined);

    const runId = randomUUID().slice(0, 8);
    const events: PublishEvent[] = Array.from({ length: o.events }, (_, i) => {
      const e = demoEvent(runId, i);
      // 2% of the handlers fail once in each process that sees them, as a flaky dependency would.
      if (i % 50 === 25) return { ...e, body: { ...(e.body as object), failOnce: true } };
      // 2% meet a downstream that is down for their first 1 to 5 attempts, in every process: retried in place,
      // then by scheduled copies, until it recovers.
      if (i % 50 === 40)
        return { ...e, body: { ...(e.body as object), failAttempts: 1 + (Math.floor(i / 50) % 5) } };
      return e;
    });
    const ids = events.map((e) => deriveMessageId(e.type, e.key));
    const expected = new Set(ids);
    const poison = poisonMessages(runId);

    // Outage bookkeeping: restarts wait while the database is down; a start-up that overlapped it may fail.
    const outages: { from: number; to: number }[] = [];
    let dbUp = true;
    const batchSize = process.env.SBINBOX_BATCH_SIZE ?? "8";
    fleet = new WorkerFleet({
      size: WORKERS,
      env: {
        ...localWorkerEnv(stack, CONSUMER),
        ...WORKER_DB_TIMEOUTS,
        SBINBOX_POSTGRES_URL: proxiedUrl.toString(),
        SBINBOX_MAX_MESSAGE_BYTES: String(MAX_MESSAGE_BYTES),
        SBINBOX_OUTAGE_BACKOFF_MIN_MS: "250",
        SBINBOX_OUTAGE_BACKOFF_MAX_MS: "2000",
        // Shorter than the defaults so a run sees every path in minutes: the first two retries are waited out
        // under the lock, the later ones go through scheduled copies.
        SBINBOX_RETRY_DELAYS_MS: "500,1000,2000,4000,8000,16000",
        SBINBOX_RETRY_MAX_WAIT_MS: "1500",
        // Group commit on (docs/batching.md): the random kills then land inside batches, their commits included,
        // and the kill-after-commit switch fires with the victim's whole batch committed and none of it settled.
        SBINBOX_BATCH_SIZE: batchSize,
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

    // The upstream half: transfers and their outbox rows in one transaction (every 10th rolled back) in a second
    // database on the same server, so the outage hits it too; two relay processes, one SIGKILLed now and then.
    const upstream = await startUpstream(stack, {
      runId,
      rollbackEvery: 10,
      env: withoutSbinboxSettings(process.env),
      // The chaos queue's window is Azure's smallest (20 s): keep 5 s of it back, not the default minute.
      relayEnv: { SBINBOX_OUTBOX_WINDOW_MARGIN_MS: "5000" },
    });
    cleanups.push(() => upstream.close());
    const upstreamCount = Math.max(20, Math.floor(o.events / 10));
    await upstream.startRelay();
    await upstream.startRelay();
    let upstreamDone = false;
    let upstreamFailed = 0;
    const upstreamRun = upstream.run(upstreamCount).then((r) => {
      upstreamFailed = r.failed;
      upstreamDone = true;
    });
    let relayKills = 0;
    const relayAlive = (r: { exitCode: number | null; signalCode: NodeJS.Signals | null }) =>
      r.exitCode === null && r.signalCode === null;

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
        // One round in four, a relay too (it may be between send and mark); each restart is a Node start-up.
        const relays = upstream.relays.filter(relayAlive);
        if (random() < 0.25 && relays.length > 0) {
          const relay = relays[Math.floor(random() * relays.length)]!;
          relay.kill("SIGKILL");
          relayKills += 1;
          out(`SIGKILL relay ${relay.pid}`);
        }
      }
    })();

    // Watch: progress, the database stopped at 40%, refusing logins at 60%, silent at 80%, the end condition.
    let applied = 0;
    let dbRestarts = 0;
    let loginPhases = 0;
    let silentPhases = 0;
    let phaseRunning = false;
    const outage = async (what: string, ms: number, begin: () => Promise<void>, end: () => Promise<void>) => {
      out(`${what} for ${ms} ms (${applied} applied)`);
      phaseRunning = true;
      outages.push({ from: Date.now(), to: Infinity });
      dbUp = false;
      await begin();
      await sleep(ms);
      await end();
      outages.at(-1)!.to = Date.now();
      dbUp = true;
      phaseRunning = false;
    };
    let lastLine = 0;
    let mostScheduled = 0;
    const deadline = started + o.timeoutMs;
    let timedOut = false;
    for (;;) {
      try {
        if (dbUp && !phaseRunning)
          applied = await scalar(db.sql, "SELECT count(DISTINCT message_id)::int AS n FROM example_credits");
      } catch {
        // The count is best effort while the server restarts.
      }
      await fleet.restartPending();
      // Relays are replaced as an orchestrator would, once the database is back (start-up migrates).
      if (dbUp) while (upstream.relays.filter(relayAlive).length < 2) await upstream.startRelay();
      if (dbRestarts === 0 && dbUp && applied >= o.events * 0.4) {
        out(`stopping the database for ${o.dbDownMs} ms (${applied} applied)`);
        outages.push({ from: Date.now(), to: Infinity });
        dbUp = false;
        await postgres.stop();
        void sleep(o.dbDownMs).then(async () => {
          await postgres.start();
          outages.at(-1)!.to = Date.now();
          dbUp = true;
          dbRestarts += 1;
          out("database started again");
        });
      }
      if (dbRestarts === 1 && loginPhases === 0 && dbUp && !phaseRunning && applied >= o.events * 0.6) {
        await admin.connect();
        void outage(
          "refusing logins (ALTER ROLE NOLOGIN, sessions ended)",
          o.loginsRefusedMs,
          async () => {
            await admin.query("ALTER ROLE CURRENT_USER NOLOGIN");
            await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE usename = current_user AND pid <> pg_backend_pid()`);
          },
          async () => {
            await admin.query("ALTER ROLE CURRENT_USER LOGIN");
            await admin.end();
            loginPhases += 1;
            out("logins accepted again");
          },
        );
      }
      if (loginPhases === 1 && silentPhases === 0 && dbUp && !phaseRunning && applied >= o.events * 0.8) {
        void outage(
          "database silent (the proxy stops forwarding, nothing closed)",
          o.dbSilentMs,
          () => Promise.resolve(proxy.stall()),
          () => {
            proxy.resume();
            silentPhases += 1;
            out("the proxy forwards again");
            return Promise.resolve();
          },
        );
      }
      const c = broker.counts(QUEUE);
      mostScheduled = Math.max(mostScheduled, c.scheduled);
      if (Date.now() - lastLine >= 2_000) {
        lastLine = Date.now();
        out(
          `applied ${applied}/${o.events} | queue ${c.active} waiting, ${c.locked} locked, ${c.scheduled} retries ` +
            `scheduled, ${c.deadLettered} DLQ | workers ${fleet.live}, kills ${fleet.counts.kills}`,
        );
      }
      if (publishError) throw publishError;
      const upstreamSettled =
        upstreamDone && dbUp && (await upstream.unsent().catch(() => 1)) === 0
          ? (await upstream.outcome()).committed.length
          : undefined;
      if (
        lateDone &&
        dbUp &&
        !phaseRunning &&
        silentPhases === 1 &&
        upstreamSettled !== undefined &&
        applied >= o.events + upstreamSettled &&
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
    await upstreamRun;
    const upstreamOutcome = await upstream.outcome();
    const upstreamIds = upstreamOutcome.committed.map((e) => deriveMessageId(e.type, e.key));
    for (const id of upstreamIds) expected.add(id);
    await fleet.stop();
    const stats = fleet.readStats();
    await publishing.catch(() => undefined);

    // The comparison: business rows, inbox rows and the broker's queues against what was sent.
    const { rows } = await db.sql.query<{ messageId: string; n: number }>(
      accountSql.creditsPerMessage.postgres,
    );
    const perMessage = new Map(rows.map((r) => [r.messageId, Number(r.n)]));
    const effects = [...perMessage.values()].reduce((a, b) => a + b, 0);
    const lost = [...expected].filter((id) => !perMessage.has(id)).length;
    const doubled = [...perMessage.values()].filter((n) => n > 1).length;
    const unexpected = [...perMessage.keys()].filter((id) => !expected.has(id)).length;
    const balances = await balancesMatch(db.sql, [...events, ...upstreamOutcome.committed]);
    const upstreamEffects = upstreamIds.reduce((sum, id) => sum + (perMessage.get(id) ?? 0), 0);
    const notCommittedEffects = upstreamOutcome.notCommitted.filter((e) =>
      perMessage.has(deriveMessageId(e.type, e.key)),
    ).length;
    const nearOutage = (at: number) => outages.some((x) => x.from - 2_000 <= at && x.to + 5_000 >= at);
    const relayCrashes = upstream.exits.filter((e) => e.signal === null && !nearOutage(e.at)).length;
    const inbox = await db.sql.query<{ id: string; done: boolean }>(
      `SELECT "MessageId" AS id, "ProcessedUtc" IS NOT NULL AS done FROM "Inbox" WHERE "Consumer" = $1`,
      [CONSUMER],
    );
    // Batches that committed: markers sharing one transaction id (xmin). Only a batch writes several markers in one
    // transaction, so this shows batching happened (batches rolled back leave no rows to count).
    const batches = await scalar(
      db.sql,
      `SELECT count(*)::int AS n FROM (SELECT xmin::text FROM "Inbox" WHERE "Consumer" = '${CONSUMER}'
       AND "ProcessedUtc" IS NOT NULL GROUP BY 1 HAVING count(*) > 1) AS b`,
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
      `  retries           at most ${mostScheduled} scheduled copies waiting at once (downstream down for 1-5 attempts)`,
    );
    out(
      `  dead-lettered     ${counts.deadLettered}: ${dlq.map((m) => `${m.messageId.split("-")[1]}=${m.reason}`).join(", ")}`,
    );
    out(
      `  faults            ${fleet.counts.kills} SIGKILLs, ${dbRestarts} database restart(s), ${loginPhases} login refusal(s), ` +
        `${silentPhases} silent database phase(s), ${fleet.counts.failedStarts} start-ups refused during an outage`,
    );
    out(`  workers           ${fleet.counts.starts} processes started, ${fleet.counts.crashes} crashed`);
    for (const report of fleet.crashReports)
      out(`    crash: ${report.trim().split("\n").slice(-3).join(" | ")}`);
    out(`  inbox             ${inboxDone} processed markers for sent events, ${inboxStray} other rows`);
    out(
      `  batches           ${batches} committed with two or more messages (SBINBOX_BATCH_SIZE ${batchSize})`,
    );
    out(
      `  worker counts     ${stats.duplicate} duplicates absorbed, ${stats.failed} transient failures (lower bounds)`,
    );
    out(
      `  effects           ${effects} credit rows; lost ${lost}, doubled ${doubled}, unexpected ${unexpected}`,
    );
    out(
      `  upstream          ${upstreamOutcome.committed.length} committed, ${upstreamOutcome.rolledBack} rolled back, ` +
        `${upstreamFailed} failed by the outage; ${upstreamEffects} downstream effects for the committed, ` +
        `${notCommittedEffects} for the rest; ${relayKills} relay SIGKILLs, ${relayCrashes} relay crashes`,
    );
    out(`  balances          ${balances ? "match the events" : "DO NOT match the events"}`);
    const ok =
      !timedOut &&
      lost === 0 &&
      doubled === 0 &&
      unexpected === 0 &&
      effects === o.events + upstreamIds.length &&
      upstreamEffects === upstreamIds.length &&
      notCommittedEffects === 0 &&
      relayCrashes === 0 &&
      balances &&
      inboxDone === expected.size &&
      inboxStray === 0 &&
      counts.active + counts.locked + counts.scheduled === 0 &&
      counts.deadLettered === poison.length &&
      dlq.length === poison.length &&
      wrongDeadLetters.length === 0 &&
      fleet.counts.crashes === 0 &&
      dbRestarts === 1 &&
      loginPhases === 1 &&
      silentPhases === 1;
    out(
      `  verdict           ${ok ? "exactly once: it holds" : "FAILED"}; took ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    process.stdout.write(
      `RESULT distinct=${o.events} effects=${effects} lost=${lost} doubled=${doubled} ` +
        `deadlettered=${counts.deadLettered} poison=${poison.length} kills=${fleet.counts.kills} db_restarts=${dbRestarts} ` +
        `logins_refused=${loginPhases} db_silent=${silentPhases} ` +
        `upstream=${upstreamIds.length} upstream_effects=${upstreamEffects} rolled_back_effects=${notCommittedEffects} ` +
        `relay_kills=${relayKills} batches=${batches}\n`,
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
