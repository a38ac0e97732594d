import assert from "node:assert/strict";
import pg from "pg";
import { enqueue } from "../../src/outbox/enqueue.ts";
import { createPostgresOutboxStore, type PostgresOutboxStore } from "../../src/outbox/postgres/store.ts";
import { startRelay, type Relay } from "../../src/outbox/relay.ts";
import { createOutboxSender } from "../../src/servicebus/outbox-sender.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const QUEUE = "outbox";

/** What only PostgreSQL has: the pg client's transaction checks and LISTEN/NOTIFY. The rest: conformance/. */
describe("outbox on PostgreSQL: enqueue checks and NOTIFY (real SDK, local broker)", function () {
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));
  let pool: pg.Pool;
  let store: PostgresOutboxStore;
  let relay: Relay | undefined;

  beforeEach(async function () {
    pool = new pg.Pool({ connectionString: await createTestDatabase("outbox pg"), max: 4 });
    store = createPostgresOutboxStore({ pool });
    await store.migrate();
  });

  afterEach(async function () {
    await relay?.stop();
    relay = undefined;
    await store.close();
    await pool.end();
  });

  it("refuses to enqueue outside a transaction, through the pool, or with a bad event", async function () {
    const client = await pool.connect();
    try {
      await assert.rejects(enqueue(client, { type: "T", key: "1", body: {} }), /not inside a transaction/);
      await assert.rejects(enqueue(pool, { type: "T", key: "1", body: {} }), /not the Pool/);
      await client.query("BEGIN");
      await assert.rejects(enqueue(client, { type: "A:B", key: "1", body: {} }), /must not contain ":"/);
      await assert.rejects(enqueue(client, { type: "T", key: "1", body: () => 1 }), /not JSON-serialisable/);
      await assert.rejects(
        enqueue(client, { type: "T", key: "1", body: {}, properties: { traceparent: "x" } }),
        /set by the relay/,
      );
      // pg reports the failed state once the server says so; either way the row is refused, not written.
      await client.query("SELECT 1/0").catch(() => undefined);
      await assert.rejects(
        enqueue(client, { type: "T", key: "1", body: {} }),
        /transaction has failed|current transaction is aborted/,
      );
      await client.query("ROLLBACK");
    } finally {
      client.release();
    }
    const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "Outbox"`);
    assert.equal(rows[0]!.n, 0);
  });

  it("wakes on NOTIFY at commit, without waiting for the poll", async function () {
    const sender = createOutboxSender({ client: fixture.client, queue: QUEUE });
    const r = await startRelay({ store, sender, pollIntervalMs: 60_000, leaseMs: 60_000 });
    relay = r;
    // The relay claims once at start and then listens; wait until the LISTEN connection is held.
    await waitUntil(() => pool.totalCount - pool.idleCount >= 1, "the LISTEN connection");
    const started = Date.now();
    const client = await pool.connect();
    await client.query("BEGIN");
    await enqueue(client, { type: "NoteCreated", key: "30", body: { noteId: 30 } });
    await client.query("COMMIT");
    client.release();
    await waitUntil(() => r.counters.sent === 1, "the notified send", 5_000);
    assert.ok(Date.now() - started < 5_000, "well inside the 60 s poll");
  });

  it("leaves out the NOTIFY when the enqueue says so", async function () {
    const listener = await pool.connect();
    const heard: string[] = [];
    listener.on("notification", (n) => heard.push(n.channel));
    await listener.query("LISTEN sbinbox_outbox");
    try {
      for (const [key, notify] of [
        ["40", false],
        ["41", true],
      ] as const) {
        const client = await pool.connect();
        await client.query("BEGIN");
        await enqueue(client, { type: "NoteCreated", key, body: {} }, { notify });
        await client.query("COMMIT");
        client.release();
      }
      // A listener's own query ends with the notifications of every transaction committed before it.
      await listener.query("SELECT 1");
      assert.deepEqual(heard, ["sbinbox_outbox"]);
    } finally {
      listener.release();
    }
  });
});
