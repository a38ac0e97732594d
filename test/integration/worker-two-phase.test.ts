import assert from "node:assert/strict";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import { FakeMailer, accountCreditedHandler, welcomeEmailHandler } from "../../src/example/index.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "nodedup";
const SLOW = "slowlock";

describe("worker: two-phase handler on PostgreSQL", function () {
  // No duplicate detection, so the same MessageId can be delivered twice, as a redelivery would.
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { RequiresDuplicateDetection: false },
      // A lock shorter than the perform, so a scheduled copy's lock is lost while it still performs.
      [SLOW]: { LockDuration: "PT2S", MaxDeliveryCount: 10, RequiresDuplicateDetection: true },
    }),
  );
  let db: Database;
  before(async () => {
    db = await exampleDatabase("worker_two_phase");
  });
  after(async () => {
    await db.close();
  });

  it("claims, performs once with the MessageId as idempotency key, marks processed; a second copy is a duplicate", async function () {
    const mailer = new FakeMailer();
    const handlers = [accountCreditedHandler(), welcomeEmailHandler(mailer)] as MessageHandler[];
    const body = Buffer.from(JSON.stringify({ userId: "u1", email: "u1@example.com" }));
    const message = { messageId: "welcome-u1", subject: "WelcomeEmailRequested", body };
    await sendRawMessages(fixture.client, QUEUE, [message]);
    const worker = startTestWorker({ client: fixture.client, db, queue: QUEUE, handlers });
    try {
      await waitUntil(() => worker.stats.settled === 1, "the first copy is settled");
      await sendRawMessages(fixture.client, QUEUE, [message]);
      await waitUntil(() => worker.stats.settled === 2, "the second copy is settled");
    } finally {
      await worker.stop();
    }
    assert.equal(worker.stats.committed, 1);
    assert.equal(worker.stats.duplicate, 1);
    assert.equal(mailer.calls, 1, "the external system was called once");
    assert.equal(mailer.sentByKey.get("welcome-u1"), "u1@example.com");
    const { rows } = await db.sql.query<{ processed: boolean }>(
      'SELECT "ProcessedUtc" IS NOT NULL AS processed FROM "Inbox" WHERE "MessageId" = $1',
      ["welcome-u1"],
    );
    assert.deepEqual(rows, [{ processed: true }]);
    assert.equal(fixture.broker.counts(QUEUE).active + fixture.broker.counts(QUEUE).locked, 0);
  });

  it("a scheduled copy redelivered while its first delivery still performs finds the claim busy: one perform at a time, one effect", async function () {
    this.timeout(40_000);
    let calls = 0;
    let inFlight = 0;
    let maxInFlight = 0;
    let effects = 0;
    const handler: MessageHandler = {
      kind: "two-phase",
      type: "Slow",
      schema: z.object({ n: z.number() }),
      async perform() {
        calls += 1;
        if (calls === 1) throw new Error("503 Service Unavailable");
        inFlight += 1;
        maxInFlight = Math.max(maxInFlight, inFlight);
        // Longer than the lock (2 s) plus the renewal limit (1 s): the copy is redelivered meanwhile.
        await new Promise((resolve) => setTimeout(resolve, 6_000));
        inFlight -= 1;
        effects += 1;
      },
    };
    await sendRawMessages(fixture.client, SLOW, [
      { messageId: "slow-1", subject: "Slow", body: Buffer.from('{"n":1}') },
    ]);
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: SLOW,
      handlers: [handler],
      maxAutoLockRenewalMs: 1_000,
      // Every retry is a scheduled copy; the busy copies keep retrying until the first one finishes.
      retryPolicy: {
        ...defaultRetryPolicy,
        jitter: 0,
        transientDelaysMs: [200, 2_000, 2_000, 2_000, 2_000],
        maxInProcessWaitMs: 0,
      },
    });
    try {
      await waitUntil(() => worker.stats.committed === 1, "the copy's perform is marked processed", 20_000);
      await waitUntil(
        () => {
          const c = fixture.broker.counts(SLOW);
          return c.active + c.locked + c.scheduled === 0;
        },
        "every copy is settled",
        20_000,
      );
    } finally {
      await worker.stop();
    }
    assert.equal(maxInFlight, 1, "never two performs at once");
    assert.equal(effects, 1, "one effect");
    assert.equal(worker.stats.committed, 1);
    assert.equal(fixture.broker.counts(SLOW).deadLettered, 0);
  });
});
