import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import { CopyProperty } from "../../src/domain/envelope.ts";
import { RetryAfterError } from "../../src/domain/errors.ts";
import type { MessageContext, MessageHandler } from "../../src/domain/handler.ts";
import { accountSql } from "../../src/example/index.ts";
import { retryMessageId } from "../../src/servicebus/message-id.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { retriesToOutlast, settleDeadlineMs, SETTLE_SLACK_MS } from "../helpers/retry-wait.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";
import { insertMarker, markProcessed } from "../helpers/inbox-rows.ts";

// A queue per test, named after the test's message: a message one test leaves behind (settled late, after its
// test gave up under load) is never received by the next test's worker and counted there.
const QUEUES = [
  "tp-503",
  "tx-down",
  "net-code",
  "net-fetch",
  "tx-3",
  "tx-long",
  "dd",
  "tx-kill",
  "tx-never",
  "tp-busy",
] as const;
const LOCK_MS = 5_000;
const fast = { ...defaultRetryPolicy, jitter: 0 };
/** The downstream outage of the tests that ride one out with the default delays. */
const OUTAGE_MS = 5_000;

/** A two-phase handler on a fake external API that fails the first `failures` calls per key. */
function flakyApi(failures: number) {
  const calls = new Map<string, number>();
  const effects = new Map<string, number>();
  const seen: { attempt: number; deliveryCount: number }[] = [];
  const handler: MessageHandler = {
    kind: "two-phase",
    type: "Flaky",
    schema: z.object({ n: z.number() }),
    perform(_body, context) {
      seen.push({ attempt: context.attempt, deliveryCount: context.deliveryCount });
      const n = (calls.get(context.idempotencyKey) ?? 0) + 1;
      calls.set(context.idempotencyKey, n);
      if (n <= failures) return Promise.reject(new Error("503 Service Unavailable"));
      // The external system dedupes by the idempotency key: a repeated key has no second effect.
      if (!effects.has(context.idempotencyKey)) effects.set(context.idempotencyKey, 1);
      return Promise.resolve();
    },
  };
  return { handler, calls, effects, seen };
}

/** A transactional handler writing a credit row; `fail(context)` decides whether this attempt throws first. */
function creditHandler(fail: (context: MessageContext) => Error | undefined): MessageHandler {
  return {
    kind: "transactional",
    type: "Credit",
    schema: z.object({ amount: z.number() }),
    async handle(body, tx, context) {
      const error = fail(context);
      if (error) throw error;
      await tx.query(accountSql.insertCredit[tx.dialect], [
        context.messageId,
        "acct",
        (body as { amount: number }).amount,
      ]);
    },
  };
}

async function credits(db: Database, messageId: string): Promise<number> {
  const { rows } = await db.sql.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM example_credits WHERE message_id = $1",
    [messageId],
  );
  return Number(rows[0]?.n ?? 0);
}

const body = (json: unknown) => Buffer.from(JSON.stringify(json));

describe("worker: failures retried over time, never burning a message", function () {
  // A test may stop the broker's clock (`frozenAt`): a scheduled copy then stays scheduled however long a loaded
  // machine takes before the test looks, and comes due when the test lets the clock run again.
  let frozenAt: number | undefined;
  const fixture = useLocalBroker(
    brokerConfig(
      Object.fromEntries(
        QUEUES.map((queue) => [
          queue,
          { MaxDeliveryCount: 10, LockDuration: `PT${LOCK_MS / 1000}S`, RequiresDuplicateDetection: true },
        ]),
      ),
    ),
    { now: () => frozenAt ?? Date.now() },
  );
  let db: Database;
  before(async () => {
    db = await exampleDatabase("worker_retry");
  });
  after(async () => {
    await db.close();
  });

  it("two-phase perform() failing once (a 503): retried on the same delivery, effect once, claim closed", async function () {
    const queue = "tp-503";
    const api = flakyApi(1);
    await sendRawMessages(fixture.client, queue, [
      { messageId: "tp-503", subject: "Flaky", body: body({ n: 1 }) },
    ]);
    const worker = startTestWorker({ client: fixture.client, db, queue, handlers: [api.handler] });
    try {
      await waitUntil(
        () => worker.stats.settled === 1,
        "the message is settled",
        settleDeadlineMs(defaultRetryPolicy, 1),
      );
    } finally {
      await worker.stop();
    }
    assert.equal(worker.stats.committed, 1);
    assert.equal(worker.stats.retriesWaited, 1);
    assert.equal(api.effects.get("tp-503"), 1);
    assert.deepEqual(api.seen, [
      { attempt: 1, deliveryCount: 0 },
      { attempt: 2, deliveryCount: 0 },
    ]);
    assert.equal(fixture.broker.counts(queue).deadLettered, 0);
    const { rows } = await db.sql.query<{ open: number }>(
      `SELECT count(*)::int AS open FROM "InboxMarkers" WHERE "MessageId" = 'tp-503' AND NOT "Processed"`,
    );
    assert.equal(rows[0]?.open, 0, "no claim left open");
  });

  it("a transactional handler whose downstream is down for 5 s: retried in place with the defaults, applied once", async function () {
    // With the default jitter the second retry can come before the outage ends, and the third waits up to 30 s.
    const deadlineMs = settleDeadlineMs(defaultRetryPolicy, retriesToOutlast(defaultRetryPolicy, OUTAGE_MS));
    this.timeout(deadlineMs + SETTLE_SLACK_MS);
    const queue = "tx-down";
    const downUntil = Date.now() + OUTAGE_MS;
    const attempts: number[] = [];
    const handler = creditHandler((context) => {
      attempts.push(context.deliveryCount);
      return Date.now() < downUntil ? new Error("ECONNREFUSED downstream") : undefined;
    });
    await sendRawMessages(fixture.client, queue, [
      { messageId: "tx-down", subject: "Credit", body: body({ amount: 3 }) },
    ]);
    const worker = startTestWorker({ client: fixture.client, db, queue, handlers: [handler] });
    try {
      await waitUntil(() => worker.stats.settled === 1, "the message is settled", deadlineMs);
    } finally {
      await worker.stop();
    }
    assert.equal(await credits(db, "tx-down"), 1);
    assert.equal(fixture.broker.counts(queue).deadLettered, 0);
    assert.ok(attempts.length >= 2, `retried (${attempts.length} attempts)`);
    assert.ok(
      attempts.every((d) => d === 0),
      "every attempt on the first delivery",
    );
  });

  // What node's net/http (and axios) throw when the downstream refuses connections, and what undici's fetch throws.
  // A network code on a handler's error is a downstream's, not the database's: the retry policy, not the outage pause.
  for (const [queue, name, downstreamError] of [
    [
      "net-code",
      "{ code: ECONNREFUSED }",
      () =>
        Object.assign(new Error("connect ECONNREFUSED 10.0.0.9:443"), { code: "ECONNREFUSED", errno: -111 }),
    ],
    [
      "net-fetch",
      "TypeError('fetch failed', { cause: { code: ECONNREFUSED } })",
      () => new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } }),
    ],
  ] as const) {
    it(`a downstream down for 5 s throwing ${name}: the retry policy, no outage, applied once`, async function () {
      const deadlineMs = settleDeadlineMs(
        defaultRetryPolicy,
        retriesToOutlast(defaultRetryPolicy, OUTAGE_MS),
      );
      this.timeout(deadlineMs + SETTLE_SLACK_MS);
      const downUntil = Date.now() + OUTAGE_MS;
      const messageId = queue;
      let attempts = 0;
      const handler = creditHandler(() => {
        attempts += 1;
        return Date.now() < downUntil ? downstreamError() : undefined;
      });
      await sendRawMessages(fixture.client, queue, [
        { messageId, subject: "Credit", body: body({ amount: 2 }) },
      ]);
      const worker = startTestWorker({ client: fixture.client, db, queue, handlers: [handler] });
      try {
        await waitUntil(() => worker.stats.settled === 1, "the message is settled", deadlineMs);
      } finally {
        await worker.stop();
      }
      assert.equal(worker.stats.outages, 0, "no database outage recorded");
      assert.equal(worker.stats.committed, 1);
      assert.equal(await credits(db, messageId), 1, "applied once");
      assert.equal(fixture.broker.counts(queue).deadLettered, 0, "never dead-lettered");
      assert.ok(
        worker.stats.retriesWaited >= 1 && attempts >= 2,
        `retried by the policy (${attempts} attempts)`,
      );
    });
  }

  it("failing three times then succeeding, delays under the lock: one effect, at most one delivery", async function () {
    let calls = 0;
    const deliveries = new Set<number>();
    const handler = creditHandler((context) => {
      deliveries.add(context.deliveryCount);
      calls += 1;
      return calls <= 3 ? new Error("deadlock victim, try again") : undefined;
    });
    const queue = "tx-3";
    const policy = { ...fast, transientDelaysMs: [100, 200, 300] };
    await sendRawMessages(fixture.client, queue, [
      { messageId: "tx-3", subject: "Credit", body: body({ amount: 1 }) },
    ]);
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue,
      handlers: [handler],
      retryPolicy: policy,
    });
    try {
      await waitUntil(
        () => worker.stats.settled === 1,
        "the message is settled",
        settleDeadlineMs(policy, 3),
      );
    } finally {
      await worker.stop();
    }
    assert.equal(calls, 4);
    assert.equal(await credits(db, "tx-3"), 1);
    assert.deepEqual([...deliveries], [0], "one delivery spent");
    assert.equal(worker.stats.retriesWaited, 3);
  });

  it("a delay longer than the in-place limit goes through a scheduled copy keyed by the original", async function () {
    const queue = "tx-long";
    const retryAfterMs = 1_500;
    const seen: MessageContext[] = [];
    const handler = creditHandler((context) => {
      seen.push(context);
      return context.attempt === 1 ? new RetryAfterError(retryAfterMs, "rate limited") : undefined;
    });
    await sendRawMessages(fixture.client, queue, [
      { messageId: "tx-long", subject: "Credit", body: body({ amount: 5 }) },
    ]);
    // The worker dates the copy from its own clock, some time between `before` and `after`.
    const before = Date.now();
    frozenAt = before;
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue,
      handlers: [handler],
      retryPolicy: { ...fast, maxInProcessWaitMs: 0 },
    });
    const peeker = fixture.client.createReceiver(queue);
    try {
      await waitUntil(
        () => worker.stats.settled === 1,
        "the original is completed after its copy is scheduled",
        SETTLE_SLACK_MS,
      );
      const after = Date.now();
      assert.equal(fixture.broker.counts(queue).scheduled, 1, "the copy waits, scheduled");
      const [copy] = await peeker.peekMessages(1);
      const dueAt = copy?.scheduledEnqueueTimeUtc?.getTime();
      assert.ok(dueAt !== undefined, "the copy has a scheduled enqueue time");
      assert.ok(
        dueAt >= before + retryAfterMs && dueAt <= after + retryAfterMs,
        `the copy is due ${retryAfterMs} ms after it was scheduled (${dueAt - before} ms after the send)`,
      );
      frozenAt = undefined;
      await waitUntil(
        () => worker.stats.settled === 2,
        "the copy is processed",
        retryAfterMs + SETTLE_SLACK_MS,
      );
    } finally {
      frozenAt = undefined;
      await peeker.close();
      await worker.stop();
    }
    assert.equal(worker.stats.retriesScheduled, 1);
    assert.equal(worker.stats.committed, 1);
    assert.equal(await credits(db, "tx-long"), 1);
    assert.equal(seen.length, 2);
    assert.equal(seen[1]!.messageId, "tx-long", "the copy is keyed by the original's MessageId");
    assert.equal(seen[1]!.attempt, 2);
    assert.equal(seen[1]!.deliveryCount, 0, "the copy is a fresh message");
    assert.equal(seen[1]!.applicationProperties[CopyProperty.originalKey], "tx-long");
    const counts = fixture.broker.counts(queue);
    assert.equal(counts.active + counts.locked + counts.scheduled + counts.deadLettered, 0);
  });

  it("the same retry scheduled twice is dropped by duplicate detection; the next attempt is not", async function () {
    const queue = "dd";
    const sender = fixture.client.createSender(queue);
    const at = new Date(Date.now() + 60_000);
    const copy = (attempt: number) => ({
      messageId: retryMessageId("dd", 0, attempt),
      body: "{}",
      subject: "Credit",
    });
    try {
      const first = await sender.scheduleMessages(copy(2), at);
      const again = await sender.scheduleMessages(copy(2), at);
      await sender.scheduleMessages(copy(3), at);
      assert.notEqual(
        first[0]?.toString(),
        again[0]?.toString(),
        "a sequence number either way, as Service Bus",
      );
      await sender.cancelScheduledMessages([...first]);
    } finally {
      await sender.close();
    }
    const counts = fixture.broker.counts(queue);
    assert.equal(counts.duplicatesDropped, 1);
    assert.equal(counts.scheduled, 1, "attempt 3 remains scheduled");
  });

  it("a crash between scheduling the copy and completing the original still makes one effect", async function () {
    // The first worker has its own connection, which the test drops while it sits between the two steps.
    const doomed = new ServiceBusClient(fixture.broker.connectionString, { retryOptions: { maxRetries: 0 } });
    let reachedGap!: () => void;
    const inGap = new Promise<void>((resolve) => (reachedGap = resolve));
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let calls = 0;
    const handler = creditHandler(() =>
      ++calls === 1 ? new Error("timeout calling the ledger") : undefined,
    );
    const queue = "tx-kill";
    const copyDelayMs = 800;
    await sendRawMessages(fixture.client, queue, [
      { messageId: "tx-kill", subject: "Credit", body: body({ amount: 7 }) },
    ]);
    const first = startTestWorker({
      client: doomed,
      db,
      queue,
      handlers: [handler],
      gracePeriodMs: 200,
      retryPolicy: {
        ...fast,
        transientDelaysMs: [copyDelayMs],
        permanentDelaysMs: [copyDelayMs],
        maxInProcessWaitMs: 0,
      },
      beforeComplete: async () => {
        reachedGap();
        await held;
      },
    });
    await inGap;
    await doomed.close(); // the crash: the link goes, the original's lock with it
    release();
    await first.stop();
    assert.equal(first.stats.retriesScheduled, 1);
    const second = startTestWorker({ client: fixture.client, db, queue, handlers: [handler] });
    try {
      // The original comes back when its lock lapses, the copy when its delay is over.
      await waitUntil(
        () => second.stats.committed + second.stats.duplicate === 2,
        "the original's redelivery and the copy are both settled",
        Math.max(LOCK_MS, copyDelayMs) + SETTLE_SLACK_MS,
      );
    } finally {
      await second.stop();
    }
    assert.equal(second.stats.committed, 1);
    assert.equal(second.stats.duplicate, 1, "whichever came second found the marker");
    assert.equal(await credits(db, "tx-kill"), 1);
  });

  it("retries used up: dead-lettered as RetriesExhausted naming the last error, never the body", async function () {
    const handler = creditHandler(() => new Error("ledger rejected the posting"));
    const queue = "tx-never";
    const policy = { ...fast, transientDelaysMs: [50, 50] };
    await sendRawMessages(fixture.client, queue, [
      { messageId: "tx-never", subject: "Credit", body: body({ amount: 424242 }) },
    ]);
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue,
      handlers: [handler],
      retryPolicy: policy,
    });
    try {
      await waitUntil(
        () => worker.stats.settled === 1,
        "the message is dead-lettered",
        settleDeadlineMs(policy, 2),
      );
    } finally {
      await worker.stop();
    }
    const dlq = fixture.client.createReceiver(queue, { subQueueType: "deadLetter" });
    try {
      const [message] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
      assert.ok(message);
      assert.equal(message.messageId, "tx-never");
      assert.equal(message.deadLetterReason, "RetriesExhausted");
      assert.equal(
        message.deadLetterErrorDescription,
        'after 3 attempts: transient Error: ledger rejected the posting (handler "Credit")',
      );
      assert.ok(!message.deadLetterErrorDescription?.includes("424242"));
      await dlq.completeMessage(message);
    } finally {
      await dlq.close();
    }
    assert.equal(worker.stats.retriesExhausted, 1);
    assert.equal(await credits(db, "tx-never"), 0);
  });

  it("a claim held by another live claimant is busy and retried with delays, not abandoned at once", async function () {
    const api = flakyApi(0);
    // Another instance's claim, open and fresh.
    await insertMarker(db.sql, "tp-busy", "test", true);
    const queue = "tp-busy";
    const policy = { ...fast, transientDelaysMs: [300, 300, 300, 300, 300, 300, 300, 300] };
    await sendRawMessages(fixture.client, queue, [
      { messageId: "tp-busy", subject: "Flaky", body: body({ n: 2 }) },
    ]);
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue,
      handlers: [api.handler],
      retryPolicy: policy,
    });
    try {
      await waitUntil(
        () => worker.stats.retriesWaited >= 2,
        "the busy claim is retried in place",
        settleDeadlineMs(policy, 2),
      );
      assert.equal(worker.stats.settled, 0, "not abandoned");
      // The other claimant finishes.
      await markProcessed(db.sql, "tp-busy");
      await waitUntil(() => worker.stats.settled === 1, "the message is settled", SETTLE_SLACK_MS);
    } finally {
      await worker.stop();
    }
    assert.equal(worker.stats.duplicate, 1);
    assert.equal(api.calls.size, 0, "this worker never performed the effect");
    assert.equal(fixture.broker.counts(queue).deadLettered, 0);
  });
});
