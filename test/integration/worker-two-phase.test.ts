import assert from "node:assert/strict";
import type { Database } from "../../src/app/database.ts";
import { FakeMailer, accountCreditedHandler, welcomeEmailHandler } from "../../src/example/index.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "nodedup";

describe("worker: two-phase handler on PostgreSQL", function () {
  // No duplicate detection, so the same MessageId can be delivered twice, as a redelivery would.
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: false } }));
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
});
