// The chaos run's session round: per-account sequences on a session-enabled queue, three `sbinbox worker` processes
// in session mode, one SIGKILLed every few seconds and restarted (its sessions pass to the others when their lock
// expires), the kill-between-commit-and-complete switch for one event, resends, poison inside the accounts' sessions,
// and handlers failing transiently (retried in place, the session held). It holds when every credit is applied
// exactly once and, per account, in its order (read from the database), and only the poison is dead-lettered.
import { randomUUID } from "node:crypto";
import { appliedCount, appliedOrder, balancesMatch, outOfOrder, tally } from "../src/app/demo-checks.ts";
import { poisonMessages } from "../src/app/demo-harness.ts";
import { localWorkerEnv, startLocalStack } from "../src/app/local-stack.ts";
import { sessionEvent } from "../src/example/demo-events.ts";
import { createServiceBusClient } from "../src/servicebus/client.ts";
import { deriveMessageId } from "../src/servicebus/message-id.ts";
import { createPublisher, type PublishEvent } from "../src/servicebus/publisher.ts";
import { sendRawMessages } from "../src/servicebus/raw.ts";
import { WorkerFleet } from "./chaos-fleet.ts";
import { OWN_RETRY } from "../src/servicebus/throttling.ts";

const QUEUE = "chaos-sessions";
const CONSUMER = "sbinbox-chaos-sessions";
const WORKERS = 3;
/** Each account a session; more than the workers hold at once (3 x 8), so sessions queue for a slot. */
const ACCOUNTS = 40;
const SESSIONS_PER_WORKER = 8;
/**
 * The session lock: a killed worker's sessions wait this long for another worker, each kill costing its messages
 * one delivery. With a kill every ~3 s, a session can meet several in a row; 30 deliveries leave room, as in the
 * main round.
 */
const LOCK_MS = 5_000;
const MAX_DELIVERY_COUNT = 30;
const BATCH = 100;

export interface SessionRoundOptions {
  readonly events: number;
  readonly killEveryMs: number;
  readonly timeoutMs: number;
  readonly random: () => number;
  readonly out: (line: string) => void;
  /** SBINBOX_BATCH_SIZE of the workers, as in the main round: a batch takes at most one message per session. */
  readonly batchSize: string;
}

export interface SessionRoundResult {
  readonly ok: boolean;
  readonly timedOut: boolean;
  /** The RESULT line's fields of the round, `sessions_...=` and `out_of_order=`. */
  readonly fields: string;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export async function runSessionRound(o: SessionRoundOptions): Promise<SessionRoundResult> {
  const { out } = o;
  const started = Date.now();
  const cleanups: (() => Promise<void>)[] = [];
  let fleet: WorkerFleet | undefined;
  // Stopped from outside, the main round's handler exits the process: nothing of this round outlives it.
  const killAll = () => fleet?.killAll();
  process.once("exit", killAll);
  try {
    out(`session round: ${o.events} credits in ${ACCOUNTS} accounts (sessions) on ${QUEUE}`);
    const stack = await startLocalStack(
      {
        queue: {
          name: QUEUE,
          lockDurationMs: LOCK_MS,
          maxDeliveryCount: MAX_DELIVERY_COUNT,
          requiresSession: true,
        },
        database: "sbinbox_chaos_sessions",
        maxConnections: 2,
      },
      cleanups,
    );
    const { broker, db } = stack;
    const runId = randomUUID().slice(0, 8);
    const events: PublishEvent[] = Array.from({ length: o.events }, (_, i) => {
      const e = sessionEvent(runId, i, ACCOUNTS);
      // As in the main round: 2% fail once in each process that sees them, 2% fail their first attempt.
      if (i % 50 === 25) return { ...e, body: { ...(e.body as object), failOnce: true } };
      if (i % 50 === 40) return { ...e, body: { ...(e.body as object), failAttempts: 1 } };
      return e;
    });
    const ids = events.map((e) => deriveMessageId(e.type, e.key));
    const expected = new Set(ids);
    const sequenceOf = new Map(
      events.map((e, i) => [ids[i]!, (e.body as { sequence: number }).sequence] as const),
    );
    const poison = poisonMessages(runId).map((m, k) => ({ ...m, sessionId: `acc-${k + 1}` }));

    const current = new WorkerFleet({
      size: WORKERS,
      env: {
        ...localWorkerEnv(stack, CONSUMER),
        SBINBOX_MAX_CONCURRENT_SESSIONS: String(SESSIONS_PER_WORKER),
        SBINBOX_BATCH_SIZE: o.batchSize,
      },
      firstGeneration: () => ({ SBINBOX_FAULT_KILL_AFTER_COMMIT: ids[Math.floor(o.events * 0.1)]! }),
      databaseUp: () => true,
      databaseWasDownBetween: () => false,
      log: out,
    });
    fleet = current;
    await current.start();
    out(`session round: ${WORKERS} workers in session mode (${SESSIONS_PER_WORKER} sessions each)`);

    const client = createServiceBusClient(
      { connectionString: broker.connectionString },
      // The worker and the publisher retry ServerBusy themselves (src/servicebus/throttling.ts).
      { retryOptions: OWN_RETRY },
    );
    cleanups.push(() => client.close());
    const publisher = createPublisher({ client, queue: QUEUE });
    cleanups.push(() => publisher.close());
    let resends = 0;
    const publishing = (async () => {
      for (let i = 0; i < events.length; i += BATCH) {
        const batch = events.slice(i, i + BATCH);
        await publisher.publishBatch(batch);
        const again = batch.filter((_, j) => (i + j) % 20 === 0);
        if (again.length > 0) await publisher.publishBatch(again);
        resends += again.length;
        // The poison in the middle of the sequences: its sessions must go on past it.
        if (i === Math.floor(events.length / 2 / BATCH) * BATCH) await sendRawMessages(client, QUEUE, poison);
      }
    })();
    let publishError: Error | undefined;
    publishing.catch(
      (error: unknown) =>
        (publishError = error instanceof Error ? error : new Error("publishing failed", { cause: error })),
    );

    let killing = true;
    const killer = (async () => {
      while (killing) {
        await sleep(o.killEveryMs * (0.5 + o.random()));
        if (!killing) break;
        const victim = current.killOne(o.random);
        if (victim) out(`session round: SIGKILL ${victim}`);
      }
    })();

    let timedOut = false;
    let lastLine = 0;
    for (;;) {
      if (publishError) throw publishError;
      await current.restartPending();
      const applied = await appliedCount(db.sql);
      const c = broker.counts(QUEUE);
      if (Date.now() - lastLine >= 2_000) {
        lastLine = Date.now();
        out(
          `session round: applied ${applied}/${o.events} | queue ${c.active} waiting, ${c.locked} locked, ` +
            `${c.deadLettered} DLQ | workers ${current.live}, kills ${current.counts.kills}`,
        );
      }
      if (
        applied >= expected.size &&
        c.active + c.locked + c.scheduled === 0 &&
        c.deadLettered >= poison.length
      )
        break;
      if (Date.now() - started > o.timeoutMs) {
        timedOut = true;
        out(`session round: TIMED OUT after ${o.timeoutMs / 1000} s`);
        break;
      }
      await sleep(250);
    }
    killing = false;
    await killer;
    await publishing.catch(() => undefined);
    await current.stop();
    const stats = current.readStats();

    const { effects, lost, doubled, unexpected } = await tally(db.sql, expected);
    const disordered = outOfOrder(await appliedOrder(db.sql), sequenceOf);
    const balances = await balancesMatch(db.sql, events);
    const counts = broker.counts(QUEUE);
    const { kills, killedAfterCommit, crashes } = current.counts;
    out(
      `  sessions          ${o.events} credits in ${ACCOUNTS} sessions, ${resends} resends (${counts.duplicatesDropped} dropped), ` +
        `${poison.length} poison; ${kills} SIGKILLs (${killedAfterCommit} after commit), ${crashes} crashes; ` +
        `${stats.duplicate} duplicates absorbed, ${stats.retriesWaited} retries waited in place (lower bounds)`,
    );
    out(
      `  sessions effects  ${effects} credit rows; lost ${lost}, doubled ${doubled}, unexpected ${unexpected}; ` +
        `${disordered} applied out of their account's order; ${counts.deadLettered} dead-lettered; ` +
        `balances ${balances ? "match" : "DO NOT match"}`,
    );
    for (const report of current.crashReports)
      // The error and its stack, not only Node's closing lines, so a crash can be traced from CI's log.
      out(`    crash: ${report.trim().split("\n").slice(-25).join("\n      ")}`);
    const ok =
      !timedOut &&
      lost === 0 &&
      doubled === 0 &&
      unexpected === 0 &&
      disordered === 0 &&
      effects === expected.size &&
      balances &&
      counts.active + counts.locked + counts.scheduled === 0 &&
      counts.deadLettered === poison.length &&
      counts.duplicatesDropped === resends &&
      crashes === 0;
    out(
      `  sessions verdict  ${ok ? "exactly once and in order per account: it holds" : timedOut ? "TIMED OUT" : "FAILED"}; ` +
        `took ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    return {
      ok,
      timedOut,
      fields:
        `sessions=${ACCOUNTS} sessions_distinct=${o.events} sessions_effects=${effects} sessions_lost=${lost} ` +
        `sessions_doubled=${doubled} out_of_order=${disordered} sessions_deadlettered=${counts.deadLettered} ` +
        `sessions_kills=${kills}`,
    };
  } finally {
    killAll();
    process.removeListener("exit", killAll);
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  }
}
