import { deriveMessageId } from "../servicebus/message-id.ts";
import { demoEvent } from "../example/demo-events.ts";
import { balancesMatch, tally } from "./demo-checks.ts";
import {
  runDemoHarness,
  type Alongside,
  type DemoOptions,
  type DemoResult,
  type DemoRun,
} from "./demo-harness.ts";
import { startUpstream, type Upstream } from "./demo-upstream.ts";
import { withoutSbinboxSettings } from "./demo-workers.ts";
import { localWorkerEnv, startLocalStack, type LocalStack } from "./local-stack.ts";

const QUEUE = "sbinbox";
const CONSUMER = "sbinbox-demo";
/** The upstream half: one in this many upstream transactions rolls back. */
const ROLLBACK_EVERY = 10;

/**
 * The whole system on one machine: the local broker and an embedded PostgreSQL in this process, two worker
 * processes competing on one queue, N events published with trouble mixed in, and a report that holds or not.
 */
export function runDemo(options: DemoOptions): Promise<DemoResult> {
  const { out } = options;
  return runDemoHarness(options, async (cleanups) => {
    out("starting the local broker and an embedded PostgreSQL ...");
    const stack = await startLocalStack(
      {
        queue: { name: QUEUE, lockDurationMs: 3_000, maxDeliveryCount: 10 },
        database: "sbinbox_demo",
        maxConnections: 4,
      },
      cleanups,
    );
    const { broker, db, migrated } = stack;
    // Whose copies the broker dropped, by MessageId: the queue's count also takes the copies the upstream relay's
    // replacement sends again (rows its killed predecessor had sent and not yet marked), which are not resends of
    // the published events.
    const dropped = new Map<string, number>();
    broker.onDuplicateDropped(QUEUE, (id) => dropped.set(id, (dropped.get(id) ?? 0) + 1));
    out(`migrated: ${migrated.applied.join(", ") || "nothing pending"}; example tables ready`);
    const upstream = upstreamHalf(stack, Math.max(20, Math.floor(options.count / 4)), cleanups, out);
    return {
      broker,
      target: QUEUE,
      consumers: [
        {
          name: CONSUMER,
          queue: QUEUE,
          sql: db.sql,
          workers: 2,
          env: localWorkerEnv(stack, CONSUMER),
          faulty: true,
        },
      ],
      event: demoEvent,
      alongside: upstream,
      async report(run) {
        const figures = await demoFigures(run, stack, upstream.outcome(), dropped);
        printFigures(figures, out);
        const ok = holds(figures);
        out(ok ? "  verdict                   exactly once: it holds" : "  verdict                   FAILED");
        return { ok, result: resultLine(figures) };
      },
    };
  });
}

type UpstreamOutcome = Awaited<ReturnType<Upstream["outcome"]>>;

/**
 * The upstream half: its own database, transfers and outbox rows in one transaction, a relay process that is
 * killed (SIGKILL) half-way and replaced.
 */
function upstreamHalf(
  stack: LocalStack,
  count: number,
  cleanups: (() => Promise<void>)[],
  out: (line: string) => void,
): Alongside & { outcome(): UpstreamOutcome } {
  let upstream: Upstream | undefined;
  let run: Promise<void> | undefined;
  let outcome: UpstreamOutcome | undefined;
  return {
    async start(runId) {
      const up = await startUpstream(stack, {
        runId,
        rollbackEvery: ROLLBACK_EVERY,
        env: withoutSbinboxSettings(process.env),
      });
      upstream = up;
      cleanups.push(() => up.close());
      await up.startRelay();
      run = (async () => {
        await up.run(Math.floor(count / 2));
        up.relays[0]!.kill("SIGKILL");
        await up.startRelay();
        await up.run(count - Math.floor(count / 2));
      })();
    },
    async finish() {
      await run;
      outcome = await upstream!.outcome();
      out(
        `upstream: ${outcome.committed.length} transactions committed and ${outcome.rolledBack} rolled back, ` +
          `each with its event in the outbox; the relay was killed once and replaced`,
      );
      return outcome.committed;
    },
    async settled() {
      return (await upstream!.unsent()) === 0;
    },
    outcome: () => outcome!,
  };
}

/** What the report counts: the run's, the database's, the broker's and the upstream's figures. */
async function demoFigures(
  run: DemoRun,
  stack: LocalStack,
  upstreamOutcome: UpstreamOutcome,
  dropped: ReadonlyMap<string, number>,
) {
  const { events, resent, poison, expected, killed } = run;
  const sql = stack.db.sql;
  // The flaky event's failure is retried under the lock (in place) or, by a worker stopping meanwhile, by a
  // scheduled copy; none is abandoned (`failed` counts a session's unsettled messages only).
  const { duplicate: duplicates, retriesWaited, retriesScheduled } = run.stats.get(CONSUMER)!;
  const { perMessage, effects, lost, doubled, unexpected } = await tally(sql, expected);
  const effectsOf = (e: { type: string; key: string }) => perMessage.get(deriveMessageId(e.type, e.key)) ?? 0;
  const upstreamIds = new Set(upstreamOutcome.committed.map((e) => deriveMessageId(e.type, e.key)));
  const counts = stack.broker.counts(QUEUE);
  let upstreamDropped = 0;
  for (const [id, n] of dropped) if (upstreamIds.has(id)) upstreamDropped += n;
  return {
    events: events.length,
    resent,
    resends: resent.length,
    // Every resend must be dropped; one dropped twice (the publisher's own resend of it) counts twice.
    resendsDropped: resent.reduce((sum, id) => sum + (dropped.get(id) ?? 0), 0),
    everyResendDropped: resent.every((id) => dropped.has(id)),
    poison: poison.length,
    killed,
    duplicates,
    retriesWaited,
    retriesScheduled,
    retries: retriesWaited + retriesScheduled,
    effects,
    expected: expected.size,
    lost,
    doubled,
    unexpected,
    // The RESULT line's `effects` stays what it was: the effects of the published events; upstream ones follow.
    publishedEffects: events.reduce((sum, e) => sum + effectsOf(e), 0),
    balances: await balancesMatch(sql, [...events, ...upstreamOutcome.committed]),
    deadLettered: counts.deadLettered,
    duplicatesDroppedOnQueue: counts.duplicatesDropped,
    transfers: upstreamOutcome.committed.length,
    upstreamRolledBack: upstreamOutcome.rolledBack,
    upstreamNotCommitted: upstreamOutcome.notCommitted.length,
    upstreamEffects: upstreamOutcome.committed.reduce((sum, e) => sum + effectsOf(e), 0),
    rolledBackApplied: upstreamOutcome.notCommitted.filter((e) =>
      perMessage.has(deriveMessageId(e.type, e.key)),
    ).length,
    upstreamDropped,
  };
}

type DemoFigures = Awaited<ReturnType<typeof demoFigures>>;

function printFigures(f: DemoFigures, out: (line: string) => void): void {
  out(`  events published          ${f.events} distinct, ${f.resends} resent, ${f.poison} poison`);
  out(`  resends dropped by broker ${f.resendsDropped} (duplicate detection on the derived MessageId)`);
  out(
    `  relay copies dropped      ${f.upstreamDropped} (resent by the replacement relay; ` +
      `${f.duplicatesDroppedOnQueue} dropped on the queue in all)`,
  );
  out(`  worker killed after commit ${f.killed} (its message redelivered and absorbed by the inbox)`);
  out(
    `  duplicates in the inbox   ${f.duplicates} (redeliveries found already done, completed without effect)`,
  );
  out(
    `  transient failures        ${f.retries} retried (${f.retriesWaited} in place on the same delivery, ` +
      `${f.retriesScheduled} by a scheduled copy), then applied`,
  );
  out(`  dead-lettered             ${f.deadLettered} (poison, at once, with a reason)`);
  out(
    `  effects                   ${f.effects} credit rows; lost ${f.lost}, doubled ${f.doubled}, unexpected ${f.unexpected}`,
  );
  out(
    `  upstream                  ${f.transfers} transfers committed, ${f.upstreamRolledBack} rolled back; ` +
      `${f.upstreamEffects} downstream effects for them, ${f.rolledBackApplied} for rolled-back ones`,
  );
  out(`  account balances          ${f.balances ? "match the events" : "DO NOT match the events"}`);
}

/** Exactly once, end to end: nothing lost, doubled or invented, every resend dropped, the poison dead-lettered. */
function holds(f: DemoFigures): boolean {
  return (
    f.lost === 0 &&
    f.doubled === 0 &&
    f.unexpected === 0 &&
    f.effects === f.expected &&
    f.upstreamNotCommitted === f.upstreamRolledBack &&
    f.upstreamEffects === f.transfers &&
    f.rolledBackApplied === 0 &&
    f.deadLettered === f.poison &&
    f.resendsDropped === f.resends &&
    f.everyResendDropped &&
    f.killed >= 1 &&
    f.balances
  );
}

function resultLine(f: DemoFigures): string {
  return (
    `RESULT distinct=${f.events} effects=${f.publishedEffects} resends=${f.resends} ` +
    `dropped_by_broker=${f.resendsDropped} duplicates_in_inbox=${f.duplicates} retries=${f.retries} poison=${f.poison} ` +
    `deadlettered=${f.deadLettered} lost=${f.lost} doubled=${f.doubled} ` +
    `upstream=${f.transfers} upstream_effects=${f.upstreamEffects} upstream_rolled_back=${f.upstreamRolledBack} ` +
    `rolled_back_effects=${f.rolledBackApplied} upstream_dropped_by_broker=${f.upstreamDropped}`
  );
}
