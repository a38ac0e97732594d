import assert from "node:assert/strict";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import type { TransactionalHandler } from "../../src/domain/handler.ts";
import { ACCOUNT_CREDITED, accountCreditedHandler } from "../../src/example/index.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { countCredits, creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

/** Tests in this file: each gets a queue of its own, so a message one leaves behind is never counted by the next. */
const TESTS = 6;

describe("worker: settlement follows the inbox outcome (real SDK, local broker, PostgreSQL)", function () {
  const fixture = useLocalBroker(
    brokerConfig(
      Object.fromEntries(
        Array.from({ length: TESTS }, (_, i) => [
          `flow-${i + 1}`,
          { LockDuration: "PT1S", MaxDeliveryCount: 3, RequiresDuplicateDetection: true },
        ]),
      ),
    ),
  );
  let db: Database;
  const workers: Worker[] = [];
  let queue = "";
  let started = 0;
  beforeEach(() => {
    started += 1;
    if (started > TESTS) throw new Error(`more than ${TESTS} tests: raise TESTS`);
    queue = `flow-${started}`;
  });

  before(async () => {
    db = await exampleDatabase("worker_flow");
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await drainDeadLetters();
  });
  after(async () => {
    await db.close();
  });

  const counts = () => fixture.broker.counts(queue);
  const settledAll = () => counts().active + counts().locked === 0;

  const drainDeadLetters = () => takeDeadLetters(fixture.client, queue);

  it("a fresh message is applied once and completed", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: queue });
    const { messageId } = await publisher.publish(ACCOUNT_CREDITED, "fresh-1", {
      accountId: "a1",
      amount: 5,
    });
    await publisher.close();
    const worker = startTestWorker({ client: fixture.client, db, queue });
    workers.push(worker);
    await waitUntil(() => worker.stats.settled === 1, "the message is settled");
    assert.equal(worker.stats.committed, 1);
    assert.equal((await creditsPerMessage(db)).get(messageId), 1);
    assert.ok(settledAll(), "nothing left in the queue");
    assert.equal(counts().deadLettered, 0);
  });

  it("a resend inside the duplicate-detection window is dropped by the broker", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: queue });
    const dropped = counts().duplicatesDropped;
    const first = await publisher.publish(ACCOUNT_CREDITED, "resend-1", { accountId: "a1", amount: 7 });
    const second = await publisher.publish(ACCOUNT_CREDITED, "resend-1", { accountId: "a1", amount: 7 });
    await publisher.close();
    assert.equal(first.messageId, second.messageId);
    assert.equal(first.messageId, deriveMessageId(ACCOUNT_CREDITED, "resend-1"));
    assert.equal(counts().duplicatesDropped, dropped + 1);
    const worker = startTestWorker({ client: fixture.client, db, queue });
    workers.push(worker);
    await waitUntil(() => worker.stats.settled === 1 && settledAll(), "the one copy is settled");
    assert.equal((await creditsPerMessage(db)).get(first.messageId), 1);
  });

  it("poison is dead-lettered at once with a reason naming the problem", async function () {
    const sender = fixture.client.createSender(queue);
    await sender.sendMessages([
      {
        messageId: "poison-json",
        subject: ACCOUNT_CREDITED,
        contentType: "application/json",
        body: Buffer.from("{nope"),
      },
      { messageId: "poison-type", subject: "NoSuchEvent", body: Buffer.from("{}") },
      {
        messageId: "poison-schema",
        subject: ACCOUNT_CREDITED,
        body: Buffer.from('{"accountId":"a1","amount":-3}'),
      },
      {
        messageId: "poison-size",
        subject: ACCOUNT_CREDITED,
        body: Buffer.from(JSON.stringify({ accountId: "a1", amount: 1, reference: "x".repeat(150) })),
      },
      { messageId: "poison-notype", body: Buffer.from("{}") },
    ]);
    await sender.close();
    const worker = startTestWorker({ client: fixture.client, db, queue, maxMessageBytes: 120 });
    workers.push(worker);
    await waitUntil(() => worker.stats.settled === 5, "all five are settled");
    const dead = await drainDeadLetters();
    const byId = new Map(dead.map((m) => [m.messageId, m]));
    const expect: [string, string, RegExp][] = [
      ["poison-json", "UndecodableBody", /not valid JSON/],
      ["poison-type", "UnknownMessageType", /NoSuchEvent/],
      ["poison-schema", "SchemaViolation", /amount/],
      ["poison-size", "MessageTooLarge", /over the limit of 120/],
      ["poison-notype", "UnknownMessageType", /subject/],
    ];
    for (const [id, reason, description] of expect) {
      const m = byId.get(id);
      assert.ok(m, `${id} is in the dead-letter queue`);
      assert.equal(m.deadLetterReason, reason, id);
      assert.match(m.deadLetterErrorDescription ?? "", description, id);
      assert.equal(m.deliveryCount, 0, `${id} was dead-lettered on its first delivery (no earlier attempt)`);
    }
    assert.equal(worker.stats.poison, 5);
    assert.equal(await countCredits(db), 2, "no effect from poison (two credits from the earlier tests)");
  });

  it("a failing business change is permanent: retried once in place, then dead-lettered as RetriesExhausted", async function () {
    // A business table's own unique index rejects the write every time: a failure, never a duplicate.
    await db.sql.query("CREATE TABLE IF NOT EXISTS biz_unique (k text PRIMARY KEY)");
    await db.sql.query("INSERT INTO biz_unique VALUES ('taken') ON CONFLICT DO NOTHING");
    const failing: TransactionalHandler<{ k: string }> = {
      kind: "transactional",
      type: "TakeKey",
      schema: z.object({ k: z.string() }),
      async handle(body, tx) {
        await tx.query("INSERT INTO biz_unique (k) VALUES ($1)", [body.k]);
      },
    };
    const publisher = createPublisher({ client: fixture.client, queue: queue });
    const { messageId } = await publisher.publish("TakeKey", "k-1", { k: "taken" });
    await publisher.close();
    const worker = startTestWorker({ client: fixture.client, db, queue, handlers: [failing] });
    workers.push(worker);
    await waitUntil(() => counts().deadLettered === 1, "the worker dead-letters it", 15_000);
    assert.equal(worker.stats.failed, 1, "one delivery, never abandoned");
    assert.equal(worker.stats.retriesWaited, 1, "the default permanent schedule: one retry after 5 s");
    assert.equal(worker.stats.duplicate, 0);
    const [dead] = await drainDeadLetters();
    assert.equal(dead?.messageId, messageId);
    assert.equal(dead?.deadLetterReason, "RetriesExhausted");
    assert.match(
      dead?.deadLetterErrorDescription ?? "",
      /^after 2 attempts: permanent error: duplicate key value/,
    );
    const { rows } = await db.sql.query('SELECT 1 FROM "InboxMarkers" WHERE "MessageId" = $1', [messageId]);
    assert.equal(rows.length, 0, "no marker without the business change");
  });

  it("killed between commit and complete: the redelivery is a duplicate, completed, one effect", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: queue });
    const { messageId } = await publisher.publish(ACCOUNT_CREDITED, "crash-1", {
      accountId: "a2",
      amount: 3,
    });
    await publisher.close();
    const { ServiceBusClient } = await import("@azure/service-bus");
    const doomedClient = new ServiceBusClient(fixture.broker.connectionString);
    let committedThenDied = false;
    const doomed = startTestWorker({
      client: doomedClient,
      db,
      queue,
      // Commit happened; the process "dies" before settling: its connection goes away, nothing is settled.
      beforeSettle: (_message, decision) => {
        if (decision.outcome !== "committed") return;
        committedThenDied = true;
        void doomedClient.close();
        return new Promise<void>(() => undefined);
      },
    });
    await waitUntil(() => committedThenDied, "the first worker committed");
    const survivor = startTestWorker({ client: fixture.client, db, queue });
    workers.push(survivor);
    await waitUntil(() => survivor.stats.settled === 1, "the redelivery is settled", 15_000);
    assert.equal(survivor.stats.duplicate, 1, "the inbox absorbed the redelivery");
    assert.equal((await creditsPerMessage(db)).get(messageId), 1);
    assert.ok(settledAll());
    assert.equal(doomed.stats.committed, 1);
  });

  it("a lock that expires during a slow handler: another instance takes the message, one effect", async function () {
    const slowOnce = (delayMs: number): TransactionalHandler => {
      const inner = accountCreditedHandler();
      let slowed = false;
      return {
        ...inner,
        async handle(body, tx, context) {
          if (!slowed) {
            slowed = true;
            await new Promise((r) => setTimeout(r, delayMs));
          }
          await inner.handle(body as never, tx, context);
        },
      };
    };
    const publisher = createPublisher({ client: fixture.client, queue: queue });
    const { messageId } = await publisher.publish(ACCOUNT_CREDITED, "slow-1", { accountId: "a3", amount: 9 });
    await publisher.close();
    // Lock 1 s, no renewal, a 2.5 s handler: the lock lapses while A works.
    const a = startTestWorker({
      client: fixture.client,
      db,
      queue,
      handlers: [slowOnce(2_500)],
      maxAutoLockRenewalMs: 0,
    });
    workers.push(a);
    await waitUntil(() => counts().locked === 1, "A holds the message");
    const b = startTestWorker({ client: fixture.client, db, queue, maxAutoLockRenewalMs: 0 });
    workers.push(b);
    await waitUntil(() => a.stats.committed + a.stats.failed === 1, "A finished", 10_000);
    await waitUntil(() => settledAll(), "the message is gone from the queue", 10_000);
    // A's commit is counted before its complete goes out, and B's complete can empty the queue first: wait for
    // A's settlement to be answered, or the assertion below reads A's stats while its complete is in flight.
    await waitUntil(
      () => a.stats.settled + a.stats.settlementFailures === 1,
      "A's settlement is answered",
      10_000,
    );
    assert.equal((await creditsPerMessage(db)).get(messageId), 1, "one effect");
    assert.equal(a.stats.committed, 1, "A's transaction won");
    assert.equal(b.stats.committed, 0);
    assert.ok(b.stats.duplicate >= 1, "B took the redelivery and found it done");
    assert.ok(
      a.stats.settlementFailures >= 1,
      `A's complete failed: its lock was lost (A ${JSON.stringify(a.stats)}, B ${JSON.stringify(b.stats)})`,
    );
    assert.equal(counts().deadLettered, 0);
  });
});
