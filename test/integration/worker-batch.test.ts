import assert from "node:assert/strict";
import pg from "pg";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import type { TransactionalHandler } from "../../src/domain/handler.ts";
import { ACCOUNT_CREDITED, accountCreditedHandler } from "../../src/example/index.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { recordingBatches } from "../helpers/recording-batches.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";
import { insertMarker } from "../helpers/inbox-rows.ts";

const QUEUE = "sbinbox";

describe("worker with group commit (SBINBOX_BATCH_SIZE > 1; real SDK, local broker, PostgreSQL)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT5S", MaxDeliveryCount: 5, RequiresDuplicateDetection: true },
    }),
  );
  let db: Database & { url: string };
  const workers: Worker[] = [];

  before(async () => {
    db = await exampleDatabase("worker_batch");
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await drainDeadLetters();
  });
  after(async () => {
    await db.close();
  });

  const counts = () => fixture.broker.counts(QUEUE);
  const settledAll = () => counts().active + counts().locked === 0;

  const drainDeadLetters = () => takeDeadLetters(fixture.client, QUEUE);

  async function publish(prefix: string, n: number): Promise<string[]> {
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    const ids: string[] = [];
    for (let i = 0; i < n; i += 1) {
      const { messageId } = await publisher.publish(ACCOUNT_CREDITED, `${prefix}-${i}`, {
        accountId: `${prefix}-acct`,
        amount: 1,
      });
      ids.push(messageId);
    }
    await publisher.close();
    return ids;
  }

  /** Polls pg_stat_activity until a session of this database waits on a lock (the batch's marker insert). */
  async function waitForLockWait(): Promise<void> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const { rows } = await db.sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      );
      if (Number(rows[0]?.n) >= 1) return;
      if (Date.now() > deadline) throw new Error("timed out waiting for the batch to wait on the raced key");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  function start(store: InboxStore, extra: Partial<Parameters<typeof startTestWorker>[0]> = {}): Worker {
    const worker = startTestWorker({
      client: fixture.client,
      db: { ...db, store },
      maxConcurrentCalls: 16,
      batchSize: 8,
      batchWaitMs: 50,
      ...extra,
    });
    workers.push(worker);
    return worker;
  }

  it("fresh messages and redeliveries whose markers exist: batches form, each message has one effect", async function () {
    const ids = await publish("mixed", 24);
    // Every third one was already processed (an earlier delivery committed and its complete was lost).
    const done = ids.filter((_, i) => i % 3 === 0);
    for (const id of done) {
      const outcome = await db.store.process({ messageId: id, consumer: "test" }, () => Promise.resolve());
      assert.equal(outcome.kind, "committed");
    }
    const { store, sizes } = recordingBatches(db.store);
    const worker = start(store);
    await waitUntil(() => worker.stats.settled === 24 && settledAll(), "all 24 settled");
    assert.ok(
      sizes.some((n) => n > 1),
      `batches of more than one message ran (sizes ${sizes.join(",")})`,
    );
    assert.equal(worker.stats.duplicate, done.length);
    assert.equal(worker.stats.committed, 24 - done.length);
    const credits = await creditsPerMessage(db);
    for (const id of ids) assert.equal(credits.get(id), done.includes(id) ? undefined : 1, id);
    assert.equal(counts().deadLettered, 0);
  });

  it("one failing handler: the others commit exactly once, the failing one is retried per the retry policy", async function () {
    const FLAKY = "BatchFlaky";
    let failures = 0;
    const flakySchema = z.object({ n: z.number(), fail: z.boolean() });
    const flaky: TransactionalHandler<z.infer<typeof flakySchema>> = {
      kind: "transactional",
      type: FLAKY,
      schema: flakySchema,
      async handle(body, tx, context) {
        await tx.query("INSERT INTO example_credits (account_id, amount, message_id) VALUES ($1, $2, $3)", [
          "flaky",
          body.n,
          context.messageId,
        ]);
        // Fails on attempts 1 and 2; the retry policy waits in place twice and attempt 3 commits.
        if (body.fail && context.attempt < 3) {
          failures += 1;
          throw new Error(`handler fails on attempt ${context.attempt}`);
        }
      },
    };
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    const ids: string[] = [];
    for (let n = 0; n < 12; n += 1) {
      const { messageId } = await publisher.publish(FLAKY, `flaky-${n}`, { n, fail: n === 5 });
      ids.push(messageId);
    }
    await publisher.close();
    const { store, sizes } = recordingBatches(db.store);
    const worker = start(store, {
      handlers: [flaky, accountCreditedHandler()],
      retryPolicy: {
        transientDelaysMs: [20, 20],
        permanentDelaysMs: [20, 20],
        jitter: 0,
        maxInProcessWaitMs: 1_000,
        lockMarginMs: 500,
      },
    });
    await waitUntil(() => worker.stats.settled === 12 && settledAll(), "all 12 settled");
    assert.ok(sizes.length > 0, "batches ran");
    // Attempt 1 fails in its batch (rolled back), again alone, then attempt 2 fails and attempt 3 commits.
    assert.ok(failures >= 2, `the failing handler ran its failing attempts (${failures})`);
    assert.equal(worker.stats.retriesWaited, 2, "two retries waited in place, per the policy");
    assert.equal(worker.stats.committed, 12);
    assert.equal(worker.stats.failed, 0);
    const credits = await creditsPerMessage(db);
    for (const id of ids) assert.equal(credits.get(id), 1, id);
    assert.equal(counts().deadLettered, 0);
  });

  it("a batch racing a concurrent delivery of one of its messages: that one is a duplicate, the others commit", async function () {
    const ids = await publish("race", 6);
    const raced = ids[2]!;
    // Another delivery of `raced` (another instance) has inserted its marker and not committed.
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      await other.query("BEGIN");
      await insertMarker(other, raced, "test");
      await other.query("INSERT INTO example_credits (account_id, amount, message_id) VALUES ($1, 1, $2)", [
        "race-acct",
        raced,
      ]);
      const { store, sizes } = recordingBatches(db.store);
      const worker = start(store, { batchSize: 6, batchWaitMs: 200 });
      // The batch holding `raced` waits on its key: the others of that batch wait with it, unsettled.
      await waitUntil(
        () => sizes.length > 0 && counts().locked > 0,
        "a batch is running and waits on the raced key",
      );
      await waitForLockWait();
      await other.query("COMMIT");
      await waitUntil(() => worker.stats.settled === 6 && settledAll(), "all 6 settled");
      assert.equal(worker.stats.duplicate, 1);
      assert.equal(worker.stats.committed, 5);
      const credits = await creditsPerMessage(db);
      for (const id of ids) assert.equal(credits.get(id), 1, id);
    } finally {
      await other.end();
    }
  });

  it("poison inside a batch is dead-lettered at once; the batch's other messages commit", async function () {
    const ids = await publish("poisoned", 6);
    const sender = fixture.client.createSender(QUEUE);
    await sender.sendMessages([
      { messageId: "batch-poison-json", subject: ACCOUNT_CREDITED, body: Buffer.from("{nope") },
      { messageId: "batch-poison-type", subject: "NoSuchEvent", body: Buffer.from("{}") },
    ]);
    await sender.close();
    const { store, sizes } = recordingBatches(db.store);
    const worker = start(store);
    await waitUntil(() => worker.stats.settled === 8 && settledAll(), "all 8 settled");
    assert.equal(worker.stats.poison, 2);
    assert.equal(worker.stats.committed, 6);
    assert.ok(
      sizes.every((n) => n <= 6),
      `poison never joins a batch (sizes ${sizes.join(",")})`,
    );
    const dead = await drainDeadLetters();
    assert.deepEqual(dead.map((m) => m.deadLetterReason).sort(), ["UndecodableBody", "UnknownMessageType"]);
    const credits = await creditsPerMessage(db);
    for (const id of ids) assert.equal(credits.get(id), 1, id);
  });
});
