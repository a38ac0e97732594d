import { deriveMessageId } from "../servicebus/message-id.ts";
import { demoEvent } from "../example/demo-events.ts";
import { balancesMatch, tally } from "./demo-checks.ts";
import { runDemoHarness, type DemoOptions, type DemoResult } from "./demo-harness.ts";
import { startUpstream, type Upstream } from "./demo-upstream.ts";
import { withoutSbinboxSettings } from "./demo-workers.ts";
import { localWorkerEnv, startLocalStack } from "./local-stack.ts";

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

    // The upstream half: its own database, transfers and outbox rows in one transaction, a relay process that is
    // killed (SIGKILL) half-way and replaced.
    let upstream: Upstream | undefined;
    let upstreamRun: Promise<void> | undefined;
    let outcome: Awaited<ReturnType<Upstream["outcome"]>> | undefined;
    const upstreamCount = Math.max(20, Math.floor(options.count / 4));
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
      alongside: {
        async start(runId) {
          const up = await startUpstream(stack, {
            runId,
            rollbackEvery: ROLLBACK_EVERY,
            env: withoutSbinboxSettings(process.env),
          });
          upstream = up;
          cleanups.push(() => up.close());
          await up.startRelay();
          upstreamRun = (async () => {
            await up.run(Math.floor(upstreamCount / 2));
            up.relays[0]!.kill("SIGKILL");
            await up.startRelay();
            await up.run(upstreamCount - Math.floor(upstreamCount / 2));
          })();
        },
        async finish() {
          await upstreamRun;
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
      },
      async report(run) {
        const { events, resent, poison, expected, killed } = run;
        const upstreamOutcome = outcome!;
        // The flaky event's failure is retried under the lock (in place) or, by a worker stopping meanwhile, by a
        // scheduled copy; none is abandoned (`failed` counts a session's unsettled messages only).
        const { duplicate: duplicates, retriesWaited, retriesScheduled } = run.stats.get(CONSUMER)!;
        const retries = retriesWaited + retriesScheduled;
        const { perMessage, effects, lost, doubled, unexpected } = await tally(db.sql, expected);
        const balances = await balancesMatch(db.sql, [...events, ...upstreamOutcome.committed]);
        const upstreamIds = upstreamOutcome.committed.map((e) => deriveMessageId(e.type, e.key));
        const upstreamEffects = upstreamIds.reduce((sum, id) => sum + (perMessage.get(id) ?? 0), 0);
        const rolledBackApplied = upstreamOutcome.notCommitted.filter((e) =>
          perMessage.has(deriveMessageId(e.type, e.key)),
        ).length;
        const transfers = upstreamOutcome.committed.length;
        // The RESULT line's `effects` stays what it was: the effects of the published events; upstream ones follow.
        const publishedEffects = events.reduce(
          (sum, e) => sum + (perMessage.get(deriveMessageId(e.type, e.key)) ?? 0),
          0,
        );
        const counts = broker.counts(QUEUE);
        const deadLettered = counts.deadLettered;
        const resends = resent.length;
        // Every resend must be dropped; one dropped twice (the publisher's own resend of it) counts twice.
        const resendsDropped = resent.reduce((sum, id) => sum + (dropped.get(id) ?? 0), 0);
        const upstreamIdSet = new Set(upstreamIds);
        let upstreamDropped = 0;
        for (const [id, n] of dropped) if (upstreamIdSet.has(id)) upstreamDropped += n;

        out(
          `  events published          ${events.length} distinct, ${resends} resent, ${poison.length} poison`,
        );
        out(`  resends dropped by broker ${resendsDropped} (duplicate detection on the derived MessageId)`);
        out(
          `  relay copies dropped      ${upstreamDropped} (resent by the replacement relay; ` +
            `${counts.duplicatesDropped} dropped on the queue in all)`,
        );
        out(`  worker killed after commit ${killed} (its message redelivered and absorbed by the inbox)`);
        out(
          `  duplicates in the inbox   ${duplicates} (redeliveries found already done, completed without effect)`,
        );
        out(
          `  transient failures        ${retries} retried (${retriesWaited} in place on the same delivery, ` +
            `${retriesScheduled} by a scheduled copy), then applied`,
        );
        out(`  dead-lettered             ${deadLettered} (poison, at once, with a reason)`);
        out(
          `  effects                   ${effects} credit rows; lost ${lost}, doubled ${doubled}, unexpected ${unexpected}`,
        );
        out(
          `  upstream                  ${transfers} transfers committed, ${upstreamOutcome.rolledBack} rolled back; ` +
            `${upstreamEffects} downstream effects for them, ${rolledBackApplied} for rolled-back ones`,
        );
        out(`  account balances          ${balances ? "match the events" : "DO NOT match the events"}`);
        const ok =
          lost === 0 &&
          doubled === 0 &&
          unexpected === 0 &&
          effects === expected.size &&
          upstreamOutcome.notCommitted.length === upstreamOutcome.rolledBack &&
          upstreamEffects === transfers &&
          rolledBackApplied === 0 &&
          deadLettered === poison.length &&
          resendsDropped === resends &&
          resent.every((id) => dropped.has(id)) &&
          killed >= 1 &&
          balances;
        out(ok ? "  verdict                   exactly once: it holds" : "  verdict                   FAILED");
        const result =
          `RESULT distinct=${events.length} effects=${publishedEffects} resends=${resends} ` +
          `dropped_by_broker=${resendsDropped} duplicates_in_inbox=${duplicates} retries=${retries} poison=${poison.length} ` +
          `deadlettered=${deadLettered} lost=${lost} doubled=${doubled} ` +
          `upstream=${transfers} upstream_effects=${upstreamEffects} upstream_rolled_back=${upstreamOutcome.rolledBack} ` +
          `rolled_back_effects=${rolledBackApplied} upstream_dropped_by_broker=${upstreamDropped}`;
        return { ok, result };
      },
    };
  });
}
