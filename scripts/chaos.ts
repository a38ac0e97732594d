// `npm run chaos [-- --events N]`: exactly-once under faults. The local broker and an embedded PostgreSQL in this
// process, three `sbinbox worker` processes competing on one queue, N distinct events of which 10% are sent twice
// (half inside the broker's duplicate window, half after it, so those reach the inbox), a worker SIGKILLed every
// few seconds and restarted, the database stopped and started once mid-run, then refusing logins for a few seconds,
// then silent (a TCP proxy between the workers and PostgreSQL stops forwarding without closing), handlers failing
// transiently (once per process, or for their first attempts in every process, retried in place and by scheduled
// copies), poison; N/10 two-phase events whose handler calls an external HTTP API owned by this process
// (scripts/chaos-downstream.ts), which dedupes by idempotency key, fails or answers slowly for some keys and is down
// for 30 s once. Upstream, N/10 transfers commit with their outbox rows (every 10th rolls back) and two
// `sbinbox relay` processes, SIGKILLed now and then, send them. For --throttled-ms (15 s) from a tenth applied, the
// broker answers 30% of every kind of operation with ServerBusy (scripts/chaos-throttle.ts). At the end the business tables, the inbox and the
// broker's queues are compared with what was sent, and the upstream database's rows with the downstream effects.
// Exit 0 only if nothing is lost, nothing is doubled and only the poison is dead-lettered. The last line is
// RESULT distinct=.. effects=.. lost=.. doubled=.. deadlettered=.. poison=.. kills=.. db_restarts=.. logins_refused=..
// db_silent=.. throttled=.. throttled_ops=.. upstream=.. upstream_effects=.. rolled_back_effects=.. relay_kills=.. two_phase=.. external_effects=..
// external_calls=.. external_lost=.. external_doubled=.. downstream_down=.. upstream_stale=..
// (upstream_stale: outbox rows the relays will not send because their first try is older than the duplicate window
// allows; the run ends as soon as only those are left, names them, and fails, without counting them as lost)
// Then the session round (scripts/chaos-sessions.ts), whose fields sessions=.. sessions_distinct=..
// sessions_effects=.. sessions_lost=.. sessions_doubled=.. out_of_order=.. sessions_deadlettered=.. sessions_kills=..
// come before outcome=, which passes only if both rounds held.
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { balancesMatch } from "../src/app/demo-checks.ts";
import { withoutSbinboxSettings } from "../src/app/demo-workers.ts";
import { startUpstream } from "../src/app/demo-upstream.ts";
import { localWorkerEnv, startLocalStack } from "../src/app/local-stack.ts";
import { accountSql } from "../src/example/accounts.ts";
import { demoEvent } from "../src/example/demo-events.ts";
import { WELCOME_EMAIL_REQUESTED } from "../src/example/welcome-email.ts";
import { createServiceBusClient } from "../src/servicebus/client.ts";
import { deriveMessageId } from "../src/servicebus/message-id.ts";
import { createPublisher, type PublishEvent } from "../src/servicebus/publisher.ts";
import { sendRawMessages, type RawMessage } from "../src/servicebus/raw.ts";
import { StallProxy } from "../test/helpers/stall-proxy.ts";
import { FakeDownstream, type Behaviour } from "./chaos-downstream.ts";
import { WorkerFleet } from "./chaos-fleet.ts";
import { options, seeded, usage, type Options } from "./chaos-options.ts";
import { runSessionRound } from "./chaos-sessions.ts";
import { ThrottlePhase } from "./chaos-throttle.ts";
import { OWN_RETRY } from "../src/servicebus/throttling.ts";

const HANDLERS = fileURLToPath(new URL("./chaos-handlers.ts", import.meta.url));

const QUEUE = "chaos";
const CONSUMER = "sbinbox-chaos";
const WORKERS = 3;
/**
 * Queue timings. A SIGKILLed worker's messages come back when their 5 s lock expires, each kill costing them one
 * delivery; an outage costs a message at most one abandon (the worker pauses at the first "unavailable") and one
 * expired lock (held messages go back when the paused link closes); a failOnce message fails once per process
 * that sees it. A two-phase message whose claimant was SIGKILLed mid-call is held off (`busy`) until the claim is
 * swept, 45 s later (WORKER_RETRY_SETTINGS); with a worker killed every ~3 s that lock-out alone costs it up to six
 * deliveries, and it can meet two. With MaxDeliveryCount 10 a run with the 45 s claim timeout dead-lettered 13 of
 * 200 healthy mails as MaxDeliveryCountExceeded; 30 leaves room for that on top of the rest, so only poison
 * reaches the DLQ. A production queue sees a kill in hours, not seconds.
 */
const LOCK_MS = 5_000;
const MAX_DELIVERY_COUNT = 30;
/** The part of the window the relays keep back (SBINBOX_OUTBOX_WINDOW_MARGIN_MS), not their default minute. */
const RELAY_WINDOW_MARGIN_MS = 5_000;
const MAX_MESSAGE_BYTES = 65_536;
const BATCH = 100;

/** The workers' database timeouts: short, so the silent phase pauses them within a few seconds. */
const WORKER_DB_TIMEOUTS = {
  SBINBOX_DB_CONNECT_TIMEOUT_MS: "2000",
  SBINBOX_DB_STATEMENT_TIMEOUT_MS: "2000",
  SBINBOX_DB_PROBE_TIMEOUT_MS: "1000",
};

/**
 * The retry settings. The waits in place are the shipped defaults (1 s, 5 s, 30 s; SBINBOX_RETRY_MAX_WAIT_MS and
 * the 20% jitter left at theirs), so the external system's 30 s outage meets what a user gets out of the box; only
 * the scheduled tail is shortened (40 s and 60 s copies instead of 2, 10, 30 and 60 minutes) so a run ends in
 * minutes. A claim left open by a SIGKILLed worker is swept after 45 s (every 2 s) instead of 5 min, so its
 * redelivery finds it `busy` for under a minute; 45 s is longer than the longest wait a live worker makes in place
 * (30 s, plus its 20% jitter capped at the 30 s limit) plus one call (6 s timeout), so a live worker's claim is
 * never swept while it waits or calls, and its retry re-enters its own claim. SBINBOX_MAX_CONCURRENT_CALLS stays at its 16: more slots
 * would keep intake up while the external system is down, but every SIGKILL would cost twice as many messages a
 * delivery.
 */
const WORKER_RETRY_SETTINGS = {
  SBINBOX_RETRY_DELAYS_MS: "1000,5000,30000,40000,60000",
  SBINBOX_CLAIM_TIMEOUT_MS: "45000",
  SBINBOX_SWEEP_INTERVAL_MS: "2000",
  // The handlers' own timeout per call: longer than the 5 s lock, shorter than the claim timeout.
  CHAOS_DOWNSTREAM_TIMEOUT_MS: "6000",
};

/**
 * What the external system does with the first calls for each key. Two-phase (mail) events, by index j: 503 for
 * their first 1 or 2 calls; the effect made and the connection reset (the answer lost); an answer after 5.5 s (past
 * the 5 s lock, so the SDK's renewal must hold it, inside the handlers' 6 s timeout); an answer after 10 s (past the
 * timeout: the effect is made, the caller gives up and retries ~1 s later with the same key, which gets 409
 * `idempotency_key_in_use` while the first call is still open, transient, and the first result on the next retry);
 * `Retry-After: 35` (over the 30 s in-place limit, so a scheduled copy), for the first 60% only so that no copy is
 * due long after publishing ends.
 */
function mailBehaviour(j: number, count: number): Behaviour {
  switch (j % 10) {
    case 1:
      return { kind: "unavailable", calls: 1 + (Math.floor(j / 10) % 2) };
    case 3:
      return { kind: "reset-after-effect" };
    case 5:
      return { kind: "slow", ms: 5_500 };
    case 7:
      return { kind: "slow", ms: 10_000 };
    case 9:
      return j < count * 0.6 ? { kind: "retry-after", seconds: 35 } : { kind: "normal" };
    default:
      return { kind: "normal" };
  }
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
  // Stopped from outside (Ctrl-C, a CI timeout): the workers, relays and embedded PostgreSQL are children that would
  // otherwise outlive this process, so the same cleanups run as at the end, then it exits.
  let halted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    out(`${signal}: stopping the workers, relays and database`);
    // Nothing is restarted from here on: the watch loop would otherwise replace the relays and workers it kills.
    halted = true;
    fleet?.halt();
    void (async () => {
      for (const cleanup of [...cleanups].reverse()) await cleanup().catch(() => undefined);
      process.exit(signal === "SIGINT" ? 130 : 143);
    })();
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
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
          duplicateDetectionWindowMs: o.duplicateWindowMs,
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
    const plan = new Map<string, Behaviour>();
    const events: PublishEvent[] = Array.from({ length: o.events }, (_, i) => {
      const e = demoEvent(runId, i);
      // 2% of the handlers fail once in each process that sees them, as a flaky dependency would.
      if (i % 50 === 25) return { ...e, body: { ...(e.body as object), failOnce: true } };
      // 2% fail their first attempt, then succeed on the same delivery after 1 s. No more than one: attempts
      // waited in place are not carried past a SIGKILL (the redelivery starts again from the attempt the message
      // carries), and with a worker killed every ~9 s a 6 s stretch of failing and waiting (two failures) was killed
      // about half the time under load: in a 10,000-event run two such messages were killed ten times in a row and
      // dead-lettered (MaxDeliveryCountExceeded). A downstream that is down for a while is modelled where it lives,
      // in the external system (its 503 counts and its 30 s outage), which a kill does not reset.
      if (i % 50 === 40) return { ...e, body: { ...(e.body as object), failAttempts: 1 } };
      // 2% ask the external system first (a read), which answers 503 to their first 1 or 2 calls: counted by the
      // external system, so a kill does not start them over.
      if (i % 50 === 10) {
        plan.set(deriveMessageId(e.type, e.key), {
          kind: "unavailable",
          calls: 1 + (Math.floor(i / 50) % 2),
        });
        return { ...e, body: { ...(e.body as object), checkDownstream: true } };
      }
      return e;
    });
    const ids = events.map((e) => deriveMessageId(e.type, e.key));
    const expected = new Set(ids);
    const poison = poisonMessages(runId);
    // Two-phase events: a welcome mail each, sent through the external system with the inbox key as its
    // idempotency key; each recipient must get exactly one mail.
    const mailCount = Math.floor(o.events / 10);
    const mails: PublishEvent[] = Array.from({ length: mailCount }, (_, j) => ({
      type: WELCOME_EMAIL_REQUESTED,
      key: `${runId}-mail-${j}`,
      body: { userId: `user-${j}`, email: `user-${j}@chaos.example.com` },
    }));
    const mailIds = new Map(
      mails.map((m, j) => [deriveMessageId(m.type, m.key), `user-${j}@chaos.example.com`]),
    );
    [...mailIds.keys()].forEach((id, j) => plan.set(id, mailBehaviour(j, mailCount)));
    // One mail whose worker SIGKILLs itself right after the call succeeded, before markProcessed.
    const killAfterPerform = [...mailIds.keys()][Math.floor((mailCount * 0.03) / 10) * 10 + 2];
    const downstream = await FakeDownstream.start((key) => plan.get(key) ?? { kind: "normal" });
    cleanups.push(() => downstream.close());

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
        ...WORKER_RETRY_SETTINGS,
        // Group commit on (docs/batching.md): the random kills then land inside batches, their commits included,
        // and the kill-after-commit switch fires with the victim's whole batch committed and none of it settled.
        SBINBOX_BATCH_SIZE: batchSize,
        SBINBOX_HANDLERS: HANDLERS,
        CHAOS_DOWNSTREAM_URL: downstream.url,
        // Every generation: the worker whose call makes this mail SIGKILLs itself before markProcessed (once).
        ...(killAfterPerform ? { CHAOS_KILL_AFTER_PERFORM: killAfterPerform } : {}),
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
      relayEnv: {
        SBINBOX_OUTBOX_WINDOW_MARGIN_MS: String(RELAY_WINDOW_MARGIN_MS),
        // A batch is started only if its send can end inside the lease, so the claim must return within lease less
        // send timeout; the demo's 4 s and 3 s leave 1 s, which a claim on a loaded machine overruns, and a row that
        // was tried before then ages towards stale on every claim. 2 s here; lease, poll and retry delay still fit
        // twice in 20 s less the margin, so --duplicate-window-ms 20000 starts too.
        SBINBOX_OUTBOX_LEASE_MS: "6000",
        SBINBOX_OUTBOX_SEND_TIMEOUT_MS: "4000",
      },
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

    const client = createServiceBusClient(
      { connectionString: broker.connectionString },
      // The worker and the publisher retry ServerBusy themselves (src/servicebus/throttling.ts).
      { retryOptions: OWN_RETRY },
    );
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
        const batch = [...events.slice(i, i + BATCH), ...mails.slice(i / 10, (i + BATCH) / 10)];
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
        `published ${published} events (${mailCount} of them two-phase) and ${earlyResends} early resends; ` +
          `${poison.length} poison messages`,
      );
      for (let k = 0; k < late.length; k += BATCH) {
        const chunk = late.slice(k, k + BATCH);
        const wait = chunk.at(-1)!.at + o.duplicateWindowMs + 2_000 - Date.now();
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

    // Watch: progress, the external system down at 20%, the database stopped at 40%, refusing logins at 60%,
    // silent at 80%, the end condition.
    let applied = 0;
    let downstreamPhases = 0;
    let downstreamDown = false;
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
    const throttling = new ThrottlePhase(broker, o.throttledMs, out);
    let lastLine = 0;
    let mostScheduled = 0;
    const deadline = started + o.timeoutMs;
    let timedOut = false;
    let staleRows: Awaited<ReturnType<typeof upstream.stale>> = [];
    for (;;) {
      try {
        if (dbUp && !phaseRunning)
          applied = await scalar(db.sql, "SELECT count(DISTINCT message_id)::int AS n FROM example_credits");
      } catch {
        // The count is best effort while the server restarts.
      }
      await fleet.restartPending();
      // Relays are replaced as an orchestrator would, once the database is back (start-up migrates).
      if (dbUp && !halted) while (upstream.relays.filter(relayAlive).length < 2) await upstream.startRelay();
      // Throttling first, before the other faults begin, so that its effect is its own (a tenth applied).
      throttling.startIf(applied >= o.events * 0.1);
      if (downstreamPhases === 0 && !downstreamDown && applied >= o.events * 0.2) {
        out(
          `the external system is down (connections reset) for ${o.downstreamDownMs} ms (${applied} applied)`,
        );
        downstreamDown = true;
        await downstream.goDown();
        void sleep(o.downstreamDownMs).then(async () => {
          await downstream.comeUp();
          downstreamDown = false;
          downstreamPhases += 1;
          out(
            `the external system is back (${downstream.effects} mails sent so far; ` +
              `${downstream.refusedWhileDown} calls refused while down)`,
          );
        });
      }
      // Only once the external system is back, so its outage meets the workers alone, not mixed with the database's.
      if (
        dbRestarts === 0 &&
        dbUp &&
        downstreamPhases === 1 &&
        !downstreamDown &&
        applied >= o.events * 0.4
      ) {
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
          `applied ${applied}/${o.events}, mails ${downstream.effects}/${mailCount} | queue ${c.active} waiting, ${c.locked} locked, ${c.scheduled} retries ` +
            `scheduled, ${c.deadLettered} DLQ | workers ${fleet.live}, kills ${fleet.counts.kills}`,
        );
      }
      if (publishError) throw publishError;
      // Stale rows are settled too: no relay will send them (docs/outbox.md), so waiting for the timeout would only
      // hide them. They are named in the report and counted apart (upstream_stale), not as lost.
      if (upstreamDone && dbUp && !phaseRunning)
        staleRows = await upstream.stale(o.duplicateWindowMs - RELAY_WINDOW_MARGIN_MS).catch(() => staleRows);
      const upstreamSettled =
        upstreamDone && dbUp && (await upstream.unsent().catch(() => -1)) === staleRows.length
          ? (await upstream.outcome()).committed.length - staleRows.length
          : undefined;
      if (
        lateDone &&
        dbUp &&
        !phaseRunning &&
        silentPhases === 1 &&
        downstreamPhases === 1 &&
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
    // Still in the outbox at the end (stale ones included): tells a relay-side stall from a slow downstream.
    const upstreamUnsent = await upstream.unsent().catch(() => -1);
    const upstreamIds = upstreamOutcome.committed.map((e) => deriveMessageId(e.type, e.key));
    // A stale row is an operator's case, not a loss: expected downstream only if a copy got there before it went
    // stale (the operator's check, docs/outbox.md), and reported by name below either way.
    const staleIds = new Set(staleRows.map((r) => r.messageId));
    for (const id of upstreamIds) if (!staleIds.has(id)) expected.add(id);
    await fleet.stop();
    const stats = fleet.readStats();
    await publishing.catch(() => undefined);

    // The comparison: business rows, inbox rows and the broker's queues against what was sent.
    const { rows } = await db.sql.query<{ messageId: string; n: number }>(
      accountSql.creditsPerMessage.postgres,
    );
    const perMessage = new Map(rows.map((r) => [r.messageId, Number(r.n)]));
    const effects = [...perMessage.values()].reduce((a, b) => a + b, 0);
    const staleApplied = [...staleIds].filter((id) => perMessage.has(id));
    for (const id of staleApplied) expected.add(id);
    // Committed upstream events that must have one effect each: all but the stale rows no copy of reached.
    const upstreamExpected = upstreamIds.length - (staleIds.size - staleApplied.length);
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
      `SELECT "MessageId" AS id, "Processed" AS done FROM "InboxMarkers" WHERE "Consumer" = $1`,
      [CONSUMER],
    );
    // Batches that committed: markers sharing one transaction id (xmin). Only a batch writes several markers in one
    // transaction, so this shows batching happened (batches rolled back leave no rows to count).
    const batches = await scalar(
      db.sql,
      `SELECT count(*)::int AS n FROM (SELECT xmin::text FROM "Inbox"
       WHERE "ConsumerId" = (SELECT "Id" FROM "InboxConsumer" WHERE "Name" = '${CONSUMER}')
       AND "ClaimedUtc" IS NULL GROUP BY 1 HAVING count(*) > 1) AS b`,
    );
    const sent = (id: string) => expected.has(id) || mailIds.has(id);
    const inboxDone = inbox.rows.filter((r) => r.done && sent(r.id)).length;
    const inboxStray = inbox.rows.filter((r) => !r.done || !sent(r.id)).length;
    // The external system's record, by idempotency key (the inbox key) and by recipient: a mail sent twice under one
    // key (every effect is kept) or under two keys (a recipient with two effects) is doubled, whatever the API's own
    // deduplication did. Each recipient gets one mail event, so the two counts do not overlap except on one key.
    const mailEffects = [...downstream.keys].filter(([, r]) => r.effects.length > 0);
    const externalLost = [...mailIds.keys()].filter(
      (id) => (downstream.keys.get(id)?.effects.length ?? 0) === 0,
    ).length;
    const perRecipient = new Map<string, Set<string>>();
    for (const [key, r] of mailEffects)
      for (const e of r.effects) perRecipient.set(e.to, (perRecipient.get(e.to) ?? new Set()).add(key));
    const externalDoubled =
      downstream.doubledKeys + [...perRecipient.values()].filter((keys) => keys.size > 1).length;
    const externalUnexpected = mailEffects.filter(
      ([key, r]) => !mailIds.has(key) || r.effects.some((e) => e.to !== mailIds.get(key)),
    ).length;
    const repeatedKeys = mailEffects.filter(([, r]) => r.calls > 1).length;
    const checkCalls = [...downstream.checks.values()].reduce((a, b) => a + b, 0);
    const killedAfterPerform = killAfterPerform ? downstream.keys.get(killAfterPerform) : undefined;
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
      `  retries           at most ${mostScheduled} scheduled copies waiting at once (Retry-After, an outage past the waits in place)`,
    );
    out(
      `  dead-lettered     ${counts.deadLettered}: ${dlq.map((m) => `${m.messageId.split("-")[1]}=${m.reason}`).join(", ")}`,
    );
    out(
      `  faults            ${fleet.counts.kills} SIGKILLs, ${dbRestarts} database restart(s), ${loginPhases} login refusal(s), ` +
        `${silentPhases} silent database phase(s), ${fleet.counts.failedStarts} start-ups refused during an outage`,
    );
    for (const m of wrongDeadLetters) {
      const key = typeof m.originalKey === "string" ? m.originalKey : m.messageId;
      const what = mailIds.has(key)
        ? `mail, ${JSON.stringify(plan.get(key))}`
        : ids.includes(key)
          ? `credit #${ids.indexOf(key)}, ${JSON.stringify(events[ids.indexOf(key)]!.body)}`
          : upstreamIds.includes(key)
            ? "upstream credit"
            : "?";
      out(
        `    not poison: ${m.messageId} (${what}, key ${key}, ${downstream.keys.get(key)?.calls ?? 0} calls): ` +
          `${m.reason} after ${m.deliveryCount} deliveries: ${m.description}`,
      );
    }
    out(`  workers           ${fleet.counts.starts} processes started, ${fleet.counts.crashes} crashed`);
    for (const report of fleet.crashReports)
      // The error and its stack, not only Node's closing lines, so a crash can be traced from CI's log.
      out(`    crash: ${report.trim().split("\n").slice(-25).join("\n      ")}`);
    out(`  inbox             ${inboxDone} processed markers for sent events, ${inboxStray} other rows`);
    out(
      `  two-phase         ${mailCount} mail events: ${downstream.effects} mails sent in ${downstream.calls} calls ` +
        `(${repeatedKeys} keys called more than once, answered from the first call); lost ${externalLost}, ` +
        `doubled ${externalDoubled}, unexpected ${externalUnexpected}; external system down ` +
        `${o.downstreamDownMs} ms ${downstreamPhases} time(s); ${checkCalls} checks by credits`,
    );
    out(
      `    killed after perform: the mail whose worker SIGKILLed itself after the call was called ` +
        `${killedAfterPerform?.calls ?? 0} time(s), ${killedAfterPerform?.effects.length ?? 0} mail(s)` +
        ` (${fleet.counts.selfKills} worker(s) killed themselves: ${fleet.counts.killedAfterPerform} after perform, ` +
        `${fleet.counts.killedAfterCommit} after commit); ${downstream.refusedWhileDown} calls refused while down, ` +
        `${downstream.keyInUse} answered 409 idempotency_key_in_use`,
    );
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
        `${notCommittedEffects} for the rest; ${upstreamUnsent} left unsent in the outbox (${staleRows.length} stale); ` +
        `${relayKills} relay SIGKILLs, ${relayCrashes} relay crashes`,
    );
    if (staleRows.length > 0) {
      out(
        `  upstream stale    ${staleRows.length} outbox rows not sent: first tried longer ago than the duplicate window ` +
          `less the margin (${(o.duplicateWindowMs - RELAY_WINDOW_MARGIN_MS) / 1000} s), so no relay resends them ` +
          `(docs/outbox.md). An operator case, not lost; this run's settings should not produce it`,
      );
      for (const r of staleRows.slice(0, 20))
        out(
          `    stale: outbox Id ${r.id}, MessageId ${r.messageId}, ${r.attempts} attempt(s), first tried ` +
            `${(r.firstTriedAgoMs / 1000).toFixed(0)} s ago, ${perMessage.has(r.messageId) ? "applied downstream (mark it sent)" : "not applied downstream (clear FirstAttemptUtc to resend)"}`,
        );
      if (staleRows.length > 20) out(`    ... and ${staleRows.length - 20} more`);
    }
    out(`  balances          ${balances ? "match the events" : "DO NOT match the events"}`);
    const ok =
      !timedOut &&
      lost === 0 &&
      doubled === 0 &&
      unexpected === 0 &&
      staleRows.length === 0 &&
      effects === o.events + upstreamExpected &&
      upstreamEffects === upstreamExpected &&
      notCommittedEffects === 0 &&
      relayCrashes === 0 &&
      balances &&
      inboxDone === expected.size + mailIds.size &&
      externalLost === 0 &&
      externalDoubled === 0 &&
      externalUnexpected === 0 &&
      downstream.effects === mailIds.size &&
      downstreamPhases === 1 &&
      // The outage must have met calls, or it proved nothing; the kill after perform fires exactly once.
      downstream.refusedWhileDown >= 1 &&
      fleet.counts.killedAfterPerform === 1 &&
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
      `  verdict           ${ok ? "exactly once: it holds" : staleRows.length > 0 ? `FAILED (${staleRows.length} upstream rows stale: an operator case, not counted as lost)` : timedOut ? `TIMED OUT (starved: ${fleet.counts.kills} kills, ${fleet.counts.killsSkipped} kill rounds skipped; not finished is a failure)` : "FAILED"}; took ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    // The session round (scripts/chaos-sessions.ts), on a broker and database of its own, in the time left.
    const sessions = await runSessionRound({
      events: Math.max(200, Math.floor(o.events / 4)),
      killEveryMs: o.killEveryMs,
      timeoutMs: Math.max(60_000, started + o.timeoutMs - Date.now()),
      random,
      out,
      batchSize,
    });
    const pass = ok && sessions.ok;
    const late = timedOut || sessions.timedOut;
    process.stdout.write(
      `RESULT distinct=${o.events} effects=${effects} lost=${lost} doubled=${doubled} ` +
        `deadlettered=${counts.deadLettered} poison=${poison.length} kills=${fleet.counts.kills} db_restarts=${dbRestarts} ` +
        `logins_refused=${loginPhases} db_silent=${silentPhases} throttled=${throttling.phases} ` +
        `throttled_ops=${throttling.refused} ` +
        `upstream=${upstreamIds.length} upstream_effects=${upstreamEffects} rolled_back_effects=${notCommittedEffects} ` +
        `relay_kills=${relayKills} two_phase=${mailIds.size} external_effects=${downstream.effects} ` +
        `external_calls=${downstream.calls} external_lost=${externalLost} external_doubled=${externalDoubled} ` +
        `downstream_down=${downstreamPhases} batches=${batches} upstream_stale=${staleRows.length} downstream_refused=${downstream.refusedWhileDown} ` +
        `key_in_use=${downstream.keyInUse} killed_after_perform=${fleet.counts.killedAfterPerform} ` +
        `killed_after_commit=${fleet.counts.killedAfterCommit} ${sessions.fields} ` +
        `outcome=${pass ? "pass" : late ? "timeout" : "fail"}\n`,
    );
    // A run that did not finish is a failure too, told apart by its exit code.
    return pass ? 0 : late ? 3 : 1;
  } finally {
    killAll();
    process.removeListener("exit", killAll);
    process.removeListener("SIGINT", onSignal);
    process.removeListener("SIGTERM", onSignal);
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
async function deadLetters(client: ReturnType<typeof createServiceBusClient>): Promise<
  {
    messageId: string;
    reason: string | undefined;
    description: string | undefined;
    deliveryCount: number | undefined;
    originalKey: unknown;
  }[]
> {
  const receiver = client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
  try {
    const messages = await receiver.peekMessages(1000);
    return messages.map((m) => ({
      messageId: String(m.messageId),
      reason: m.deadLetterReason,
      description: m.deadLetterErrorDescription,
      deliveryCount: m.deliveryCount,
      originalKey: m.applicationProperties?.["sbinbox-original-key"],
    }));
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
