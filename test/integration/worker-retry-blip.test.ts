import assert from "node:assert/strict";
import { openDatabase, type Database } from "../../src/app/database.ts";
import type { TwoPhaseHandler } from "../../src/domain/handler.ts";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import {
  FakeMailer,
  welcomeEmailSchema,
  type WelcomeEmailRequested,
} from "../../src/example/welcome-email.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { startTestWorker } from "../helpers/worker.ts";

const QUEUE = "blip";

/**
 * The database goes away right after a two-phase effect succeeded and before it is recorded: the worker waits out
 * the outage, re-enters its own open claim (it is not `busy` to itself) and records the effect without a second call.
 */
describe("worker: two-phase markProcessed meets a database blip (own PostgreSQL)", function () {
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { MaxDeliveryCount: 10, LockDuration: "PT5S" } }));
  let pgServer: EmbeddedPostgresServer;
  let db: Database;
  before(async () => {
    pgServer = await EmbeddedPostgresServer.create();
    const url = await pgServer.createDatabase("blip");
    db = await openDatabase({ kind: "postgres", url }, { preCheck: true, maxConnections: 4 });
    await db.store.migrate();
  });
  after(async () => {
    await db.close();
    await pgServer.dispose();
  });

  it("waits for the database, re-enters its claim, records the effect once; nothing dead-lettered", async function () {
    const mailer = new FakeMailer();
    let restarted: Promise<void> | undefined;
    const handler: TwoPhaseHandler<WelcomeEmailRequested> = {
      kind: "two-phase",
      type: "WelcomeEmailRequested",
      schema: welcomeEmailSchema,
      async perform(body, context) {
        await mailer.send({ to: body.email, subject: "Welcome", idempotencyKey: context.idempotencyKey });
        if (!restarted) {
          await pgServer.stop();
          restarted = new Promise((resolve) => setTimeout(resolve, 1_500)).then(() => pgServer.start());
        }
      },
    };
    const body = Buffer.from(JSON.stringify({ userId: "u9", email: "u9@example.com" }));
    await sendRawMessages(fixture.client, QUEUE, [
      { messageId: "blip-1", subject: "WelcomeEmailRequested", body },
    ]);
    const worker = startTestWorker({ client: fixture.client, db, queue: QUEUE, handlers: [handler] });
    try {
      await waitUntil(() => worker.stats.settled === 1, "the message is settled", 30_000);
    } finally {
      await restarted;
      await worker.stop();
    }
    assert.equal(worker.stats.outages, 1, "the blip was met as an outage");
    assert.equal(worker.stats.committed, 1);
    assert.equal(mailer.calls, 1, "the effect was not performed again: this delivery knew it had succeeded");
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    const { rows } = await db.sql.query<{ processed: boolean }>(
      'SELECT "Processed" AS processed FROM "InboxMarkers" WHERE "MessageId" = $1',
      ["blip-1"],
    );
    assert.deepEqual(rows, [{ processed: true }]);
  });
});
