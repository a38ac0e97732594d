import assert from "node:assert/strict";
import pg from "pg";
import { enqueue } from "../../src/outbox/enqueue.ts";
import { createPostgresOutboxStore } from "../../src/outbox/postgres/store.ts";
import { startRelay } from "../../src/outbox/relay.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { createOutboxSender } from "../../src/servicebus/outbox-sender.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

/** The relay pointed at a session-enabled queue (its rows carry no session id): refused rows are set aside. */
describe("outbox relay on a session-enabled queue (real SDK, local broker, PostgreSQL)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ sq: { RequiresSession: true } }));

  it("sets each refused row aside with Service Bus's reason instead of retrying it forever", async () => {
    const pool = new pg.Pool({ connectionString: await createTestDatabase("relay_sessions"), max: 4 });
    const store = createPostgresOutboxStore({ pool });
    await store.migrate();
    const client = await pool.connect();
    await client.query("BEGIN");
    await enqueue(
      client,
      [1, 2, 3].map((k) => ({ type: "N", key: String(k), body: { k } })),
    );
    await client.query("COMMIT");
    client.release();
    const sender = createOutboxSender({ client: fixture.client, queue: "sq" });
    const relay = await startRelay({
      store,
      sender,
      retryDelayMs: 200,
      pollIntervalMs: 500,
      onError: () => undefined,
    });
    try {
      await waitUntil(() => relay.counters.setAside === 3, "three rows set aside");
      const { rows } = await pool.query<{ error: string }>(
        `SELECT "Error" AS error FROM "Outbox" WHERE "SetAsideUtc" IS NOT NULL ORDER BY "Id"`,
      );
      assert.equal(rows.length, 3);
      for (const row of rows) assert.match(row.error, /The SessionId was not set on a message/);
      assert.equal(relay.counters.sent, 0);
      assert.equal(fixture.broker.counts("sq").active, 0);
    } finally {
      await relay.stop();
      await sender.close();
      await store.close();
      await pool.end();
    }
  });

  it("sets aside a row whose sessionId the SDK refuses (129 UTF-16 units), and sends the other keys", async () => {
    // As a publisher counting code points wrote it (65 of them, 129 units): the SDK's plain Error at encoding is
    // the row's, so the row is set aside with it instead of being retried for ever.
    const pool = new pg.Pool({ connectionString: await createTestDatabase("relay_session_shape"), max: 4 });
    const store = createPostgresOutboxStore({ pool });
    await store.migrate();
    const tooLong = "\u{1F600}".repeat(64) + "x";
    const inserted: [key: string, sessionId: string][] = [
      ["1", tooLong],
      ["2", "s-2"],
    ];
    for (const [key, sessionId] of inserted)
      await pool.query(
        `INSERT INTO "Outbox" ("MessageId", "Type", "Key", "Body", "SessionId") VALUES ($1, 'N', $2, '{}', $3)`,
        [deriveMessageId("N", key), key, sessionId],
      );
    const sender = createOutboxSender({ client: fixture.client, queue: "sq" });
    const relay = await startRelay({
      store,
      sender,
      retryDelayMs: 200,
      pollIntervalMs: 500,
      onError: () => undefined,
    });
    try {
      await waitUntil(
        () => relay.counters.setAside === 1 && relay.counters.sent === 1,
        "one set aside, one sent",
      );
      const { rows } = await pool.query<{ key: string; error: string | null; set: boolean }>(
        `SELECT "Key" AS key, "Error" AS error, "SetAsideUtc" IS NOT NULL AS set FROM "Outbox" ORDER BY "Id"`,
      );
      assert.equal(rows[0]!.set, true);
      assert.match(
        rows[0]!.error ?? "",
        /Length of 'sessionId' property on the message cannot be greater than 128/,
      );
      assert.equal(relay.counters.failedSends, 0);
      assert.equal(fixture.broker.counts("sq").active, 1);
    } finally {
      await relay.stop();
      await sender.close();
      await store.close();
      await pool.end();
    }
  });
});
