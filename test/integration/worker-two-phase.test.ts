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
      'SELECT "Processed" AS processed FROM "InboxMarkers" WHERE "MessageId" = $1',
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

  it("an external call slow past the lock: the redelivery finds the claim busy and is retried by scheduled copies, the first delivery's effect is marked, the late completion fails, the retry is a duplicate; one call, one effect", async function () {
    this.timeout(40_000);
    const calls: string[] = [];
    const sent = new Map<string, number>();
    let inFlight = 0;
    let maxInFlight = 0;
    const handler: MessageHandler = {
      kind: "two-phase",
      type: "SlowMail",
      schema: z.object({ to: z.string() }),
      async perform(_body, context) {
        calls.push(context.idempotencyKey);
        inFlight += 1;
        maxInFlight = Math.max(maxInFlight, inFlight);
        // An API answering after 6 s: past the 2 s lock and the 1 s of renewal, so the broker redelivers meanwhile.
        await new Promise((resolve) => setTimeout(resolve, 6_000));
        inFlight -= 1;
        // The external system dedupes by key, as a real mail API does.
        sent.set(context.idempotencyKey, (sent.get(context.idempotencyKey) ?? 0) + 1);
      },
    };
    await sendRawMessages(fixture.client, SLOW, [
      { messageId: "slow-mail-1", subject: "SlowMail", body: Buffer.from('{"to":"a@example.com"}') },
    ]);
    // Two instances, as in production: the redelivery may reach either.
    const options = {
      client: fixture.client,
      db,
      queue: SLOW,
      handlers: [handler],
      maxAutoLockRenewalMs: 1_000,
      retryPolicy: {
        ...defaultRetryPolicy,
        jitter: 0,
        transientDelaysMs: [1_000, 2_000, 2_000, 2_000, 2_000, 2_000],
      },
    };
    const workers = [startTestWorker(options), startTestWorker(options)];
    const sum = (pick: (s: (typeof workers)[number]["stats"]) => number) =>
      workers.reduce((n, w) => n + pick(w.stats), 0);
    try {
      await waitUntil(() => sum((s) => s.committed) === 1, "the slow perform is marked processed", 20_000);
      await waitUntil(() => sum((s) => s.duplicate) >= 1, "the redelivered message is a duplicate", 20_000);
      await waitUntil(
        () => {
          const c = fixture.broker.counts(SLOW);
          return c.active + c.locked + c.scheduled === 0;
        },
        "the message and its retry copies are settled",
        20_000,
      );
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
    }
    assert.deepEqual(calls, ["slow-mail-1"], "the external system was called once, with the inbox key");
    assert.deepEqual([...sent.entries()], [["slow-mail-1", 1]], "one effect");
    assert.equal(maxInFlight, 1, "never two performs at once");
    assert.ok(sum((s) => s.failed) >= 1, "the redelivery met the open claim (busy) at least once");
    // With 1 s of renewal no wait fits under the lock, so each busy retry is a scheduled copy, not an abandon.
    assert.equal(
      sum((s) => s.retriesScheduled),
      sum((s) => s.failed),
      "every busy attempt scheduled a retry",
    );
    assert.ok(
      sum((s) => s.settlementFailures) >= 1,
      "the first delivery's completion came after its lock was lost",
    );
    assert.equal(fixture.broker.counts(SLOW).deadLettered, 0, "nothing dead-lettered");
    const { rows } = await db.sql.query<{ processed: boolean }>(
      'SELECT "Processed" AS processed FROM "InboxMarkers" WHERE "MessageId" = $1',
      ["slow-mail-1"],
    );
    assert.deepEqual(rows, [{ processed: true }], "one inbox row, processed");
  });
});
