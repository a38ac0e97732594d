import { sessionEvent } from "../example/demo-events.ts";
import { deriveMessageId } from "../servicebus/message-id.ts";
import { appliedOrder, balancesMatch, outOfOrder, tally } from "./demo-checks.ts";
import { runDemoHarness, type DemoOptions, type DemoResult } from "./demo-harness.ts";
import { localWorkerEnv, startLocalStack } from "./local-stack.ts";

const QUEUE = "sbinbox-sessions";
const CONSUMER = "sbinbox-demo";
/** Accounts, each a session: with the default 2000 events, 100 credits each to apply in order. */
const ACCOUNTS = 20;
/** Sessions each worker holds at once (SBINBOX_MAX_CONCURRENT_SESSIONS): two workers share the 20 accounts. */
const SESSIONS_PER_WORKER = 8;

/**
 * The sessions variant of the demo: per-account sequences on a session-enabled queue (each credit numbered within
 * its account, the account its session), two workers in session mode, with resends, poison inside the accounts'
 * sessions, a transient failure (retried in place, its session held) and a worker killed between commit and complete
 * (its sessions pass to the others once their lock expires). It holds when every credit is applied exactly once and,
 * per account, in its order: read from the database, the order the credits were applied in against their numbers.
 */
export function runSessionsDemo(options: DemoOptions): Promise<DemoResult> {
  const { out } = options;
  return runDemoHarness(options, async (cleanups) => {
    out("starting the local broker (a session-enabled queue) and an embedded PostgreSQL ...");
    const stack = await startLocalStack(
      {
        queue: { name: QUEUE, lockDurationMs: 3_000, maxDeliveryCount: 10, requiresSession: true },
        database: "sbinbox_demo",
        maxConnections: 4,
      },
      cleanups,
    );
    const { broker, db } = stack;
    out(`queue ${QUEUE} requires sessions; ${ACCOUNTS} accounts, each its own session; example tables ready`);
    return {
      broker,
      target: QUEUE,
      consumers: [
        {
          name: CONSUMER,
          queue: QUEUE,
          sql: db.sql,
          workers: 2,
          env: {
            ...localWorkerEnv(stack, CONSUMER),
            SBINBOX_MAX_CONCURRENT_SESSIONS: String(SESSIONS_PER_WORKER),
          },
          faulty: true,
        },
      ],
      event: (runId, index) => sessionEvent(runId, index, ACCOUNTS),
      // In the accounts' own sessions: a session with poison in it goes on past it.
      poison: (messages) => messages.map((m, k) => ({ ...m, sessionId: `acc-${k + 1}` })),
      async report(run) {
        const { events, resent, poison, expected, killed } = run;
        const { duplicate: duplicates, retriesWaited } = run.stats.get(CONSUMER)!;
        const { effects, lost, doubled, unexpected } = await tally(db.sql, expected);
        const sequenceOf = new Map(
          events.map((e) => [deriveMessageId(e.type, e.key), (e.body as { sequence: number }).sequence]),
        );
        const disordered = outOfOrder(await appliedOrder(db.sql), sequenceOf);
        const balances = await balancesMatch(db.sql, events);
        const counts = broker.counts(QUEUE);
        const resends = resent.length;
        out(
          `  events published          ${events.length} distinct in ${ACCOUNTS} sessions, ${resends} resent, ${poison.length} poison`,
        );
        out(
          `  resends dropped by broker ${counts.duplicatesDropped} (duplicate detection on the derived MessageId)`,
        );
        out(
          `  worker killed after commit ${killed} (its sessions taken over once their lock expired; its message absorbed by the inbox)`,
        );
        out(
          `  duplicates in the inbox   ${duplicates} (redeliveries found already done, completed without effect)`,
        );
        out(
          `  retries waited in place   ${retriesWaited} (a transient failure: its session held, its later credits behind it)`,
        );
        out(`  dead-lettered             ${counts.deadLettered} (poison, at once, its session going on)`);
        out(
          `  effects                   ${effects} credit rows; lost ${lost}, doubled ${doubled}, unexpected ${unexpected}`,
        );
        out(`  order per account         ${disordered} credits applied out of their account's order`);
        out(`  account balances          ${balances ? "match the events" : "DO NOT match the events"}`);
        const ok =
          lost === 0 &&
          doubled === 0 &&
          unexpected === 0 &&
          disordered === 0 &&
          effects === expected.size &&
          counts.deadLettered === poison.length &&
          counts.duplicatesDropped === resends &&
          killed >= 1 &&
          balances;
        out(
          ok
            ? "  verdict                   exactly once and in order per account: it holds"
            : "  verdict                   FAILED",
        );
        const result =
          `RESULT sessions=${ACCOUNTS} distinct=${events.length} effects=${effects} resends=${resends} ` +
          `dropped_by_broker=${counts.duplicatesDropped} duplicates_in_inbox=${duplicates} retries_waited=${retriesWaited} ` +
          `poison=${poison.length} deadlettered=${counts.deadLettered} lost=${lost} doubled=${doubled} out_of_order=${disordered}`;
        return { ok, result };
      },
    };
  });
}
