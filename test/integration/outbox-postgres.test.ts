import assert from "node:assert/strict";
import { context, trace } from "@opentelemetry/api";
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import pg from "pg";
import { ConfigError } from "../../src/domain/errors.ts";
import { enqueue } from "../../src/outbox/enqueue.ts";
import { createPostgresOutboxStore, type PostgresOutboxStore } from "../../src/outbox/postgres/store.ts";
import { startRelay, type Relay, type RelayOptions } from "../../src/outbox/relay.ts";
import { createOutboxSender } from "../../src/servicebus/outbox-sender.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";

const QUEUE = "outbox";

describe("outbox and relay on PostgreSQL (real SDK, local broker)", function () {
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));
  const telemetry = useTelemetryCapture();
  let pool: pg.Pool;
  let store: PostgresOutboxStore;
  const relays: Relay[] = [];

  beforeEach(async function () {
    const url = await createTestDatabase(this.currentTest?.title ?? "outbox");
    pool = new pg.Pool({ connectionString: url, max: 6 });
    store = createPostgresOutboxStore({ pool });
    await store.migrate();
    await pool.query(`CREATE TABLE notes (id integer PRIMARY KEY, text text NOT NULL)`);
    await drain(); // messages an earlier test left behind
  });

  afterEach(async function () {
    await Promise.all(relays.splice(0).map((r) => r.stop()));
    await store.close();
    await pool.end();
  });

  async function relay(options: Partial<RelayOptions> = {}): Promise<Relay> {
    const sender = createOutboxSender({ client: fixture.client, queue: QUEUE });
    const r = await startRelay({ store, sender, pollIntervalMs: 100, leaseMs: 1_000, ...options });
    relays.push(r);
    return r;
  }

  /** One upstream transaction: its business rows and its events, committed or rolled back together. */
  async function upstream(ids: number[], outcome: "commit" | "rollback" = "commit"): Promise<void> {
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      for (const id of ids)
        await client.query("INSERT INTO notes (id, text) VALUES ($1, $2)", [id, `n${id}`]);
      await enqueue(
        client,
        ids.map((id) => ({ type: "NoteCreated", key: String(id), body: { noteId: id } })),
      );
      await client.query(outcome === "commit" ? "COMMIT" : "ROLLBACK");
    } finally {
      client.release();
    }
  }

  async function receive(n: number, timeoutMs = 15_000): Promise<ServiceBusReceivedMessage[]> {
    const receiver = fixture.client.createReceiver(QUEUE, {
      receiveMode: "receiveAndDelete",
      skipParsingBodyAsJson: true,
    });
    const got: ServiceBusReceivedMessage[] = [];
    try {
      const deadline = Date.now() + timeoutMs;
      while (got.length < n && Date.now() < deadline)
        got.push(...(await receiver.receiveMessages(n - got.length, { maxWaitTimeInMs: 300 })));
      got.push(...(await receiver.receiveMessages(50, { maxWaitTimeInMs: 200 }))); // nothing more than expected
    } finally {
      await receiver.close();
    }
    return got;
  }

  async function drain(): Promise<void> {
    await receive(0, 0);
  }

  const idOf = (m: ServiceBusReceivedMessage): number =>
    (JSON.parse(Buffer.from(m.body as Uint8Array).toString("utf8")) as { noteId: number }).noteId;

  it("migrates once when two instances run it together, and again as a no-op", async function () {
    const other = createPostgresOutboxStore({ pool });
    const again = await Promise.all([store.migrate(), other.migrate()]);
    assert.deepEqual(again, [{ applied: [] }, { applied: [] }]);
    const { rows } = await pool.query(`SELECT "Version" FROM "SbOutboxSchemaVersion"`);
    assert.deepEqual(rows, [{ Version: 1 }]);
  });

  it("sends nothing for a rolled-back upstream transaction, and the committed one once", async function () {
    await upstream([1, 2], "rollback");
    await upstream([3]);
    await relay();
    const got = await receive(1);
    assert.deepEqual(got.map(idOf), [3]);
    assert.equal(got[0]!.messageId, deriveMessageId("NoteCreated", "3"));
    assert.equal(got[0]!.subject, "NoteCreated");
    const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "Outbox"`);
    assert.equal(rows[0]!.n, 1, "the rolled-back rows never existed");
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
      await client.query("ROLLBACK");
    } finally {
      client.release();
    }
  });

  it("a relay that dies between send and mark causes a resend the broker drops: one delivery", async function () {
    await upstream([10, 11, 12]);
    const dropped = fixture.broker.counts(QUEUE).duplicatesDropped;
    const crashed = await relay({
      afterSend: () => {
        throw new Error("crash between send and mark");
      },
      retryDelayMs: 60_000,
    });
    await waitUntil(
      () => crashed.counters.failedSends === 0 && fixture.broker.counts(QUEUE).active >= 3,
      "first copies",
    );
    await crashed.stop();
    const { rows: unmarked } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "Outbox" WHERE "SentUtc" IS NULL`,
    );
    assert.equal(unmarked[0]!.n, 3, "sent but not marked");
    const restarted = await relay();
    await waitUntil(() => restarted.counters.sent === 3, "the resend after the lease", 10_000);
    assert.equal(fixture.broker.counts(QUEUE).duplicatesDropped, dropped + 3);
    const got = await receive(3);
    assert.deepEqual(got.map(idOf), [10, 11, 12]);
    const { rows } = await pool.query<{ a: number }>(
      `SELECT "Attempts" AS a FROM "Outbox" WHERE "SentUtc" IS NOT NULL`,
    );
    assert.deepEqual(
      rows.map((r: { a: number }) => r.a),
      [2, 2, 2],
    );
  });

  it("two relays at once send every row exactly once", async function () {
    for (let t = 0; t < 20; t++) await upstream(Array.from({ length: 10 }, (_, i) => 1000 + t * 10 + i));
    const dropped = fixture.broker.counts(QUEUE).duplicatesDropped;
    const [a, b] = await Promise.all([relay({ batchSize: 7 }), relay({ batchSize: 7 })]);
    await waitUntil(() => a.counters.sent + b.counters.sent === 200, "all 200 rows sent", 20_000);
    assert.equal(fixture.broker.counts(QUEUE).duplicatesDropped, dropped, "no row was sent twice");
    const got = await receive(200);
    assert.equal(got.length, 200);
    assert.equal(new Set(got.map((m) => m.messageId)).size, 200);
    const { rows } = await pool.query<{ a: number }>(`SELECT max("Attempts")::int AS a FROM "Outbox"`);
    assert.equal(rows[0]!.a, 1);
  });

  it("sets aside a row the broker refuses and sends the rows behind it", async function () {
    const client = await pool.connect();
    await client.query("BEGIN");
    await enqueue(client, [
      { type: "NoteCreated", key: "20", body: { noteId: 20 } },
      { type: "NoteCreated", key: "21", body: { noteId: 21, text: "x".repeat(300 * 1024) } },
      { type: "NoteCreated", key: "22", body: { noteId: 22 } },
    ]);
    await client.query("COMMIT");
    client.release();
    const r = await relay();
    await waitUntil(() => r.counters.sent === 2 && r.counters.setAside === 1, "two sent, one set aside");
    assert.deepEqual((await receive(2)).map(idOf), [20, 22]);
    const { rows } = await pool.query<{ key: string; error: string }>(
      `SELECT "Key" AS key, "Error" AS error FROM "Outbox" WHERE "SetAsideUtc" IS NOT NULL`,
    );
    assert.equal(rows.length, 1);
    assert.equal(rows[0]!.key, "21");
    assert.match(rows[0]!.error, /MessageSizeExceeded/);
    assert.equal((await r.readiness()).ready, true, "a set-aside row is counted, not a readiness failure");
    assert.equal(r.status?.setAside, 1);
  });

  it("sends in commit order, across batches", async function () {
    const committed: number[] = [];
    for (let t = 0; t < 8; t++) {
      const ids = [t * 3 + 102, t * 3 + 100, t * 3 + 101]; // not sorted: order is the enqueue order
      await upstream(ids);
      committed.push(...ids);
    }
    await relay({ batchSize: 5 });
    assert.deepEqual((await receive(24)).map(idOf), committed);
  });

  it("wakes on NOTIFY at commit, without waiting for the poll", async function () {
    const r = await relay({ pollIntervalMs: 60_000, leaseMs: 60_000 });
    await waitUntil(() => r.status !== undefined, "the first status");
    await new Promise((resolve) => setTimeout(resolve, 300)); // let the LISTEN connection attach
    const started = Date.now();
    await upstream([30]);
    await waitUntil(() => r.counters.sent === 1, "the notified send", 5_000);
    assert.ok(Date.now() - started < 5_000);
    assert.deepEqual((await receive(1)).map(idOf), [30]);
  });

  it("leaves a row first tried before the window alone and reports it on readiness", async function () {
    await upstream([40, 41]);
    await pool.query(
      `UPDATE "Outbox" SET "Attempts" = 1, "FirstAttemptUtc" = now() - interval '1 hour' WHERE "Key" = '40'`,
    );
    const r = await relay();
    await waitUntil(() => r.counters.sent === 1, "the fresh row sent");
    assert.deepEqual((await receive(1)).map(idOf), [41]);
    const report = await r.readiness();
    assert.equal(report.ready, false);
    assert.equal((report.outbox as { stale: number }).stale, 1);
    assert.match(String((report.problems as string[])[0]), /duplicate-detection window/);
  });

  it("refuses settings that could resend after the duplicate-detection window", async function () {
    const sender = createOutboxSender({ client: fixture.client, queue: QUEUE });
    try {
      await assert.rejects(
        startRelay({ store, sender, leaseMs: 300_000, duplicateWindowMs: 600_000 }),
        (error: unknown) =>
          error instanceof ConfigError &&
          error.setting.includes("SBINBOX_OUTBOX_LEASE_MS") &&
          error.setting.includes("SBINBOX_QUEUE_DUPLICATE_WINDOW_MS"),
      );
    } finally {
      await sender.close();
    }
  });

  it("continues the upstream trace through the relay's send into the message", async function () {
    const tracer = trace.getTracer("upstream");
    const span = tracer.startSpan("upstream transaction");
    await context.with(trace.setSpan(context.active(), span), () => upstream([50]));
    span.end();
    await relay();
    const [m] = await receive(1);
    const traceId = span.spanContext().traceId;
    assert.match(String(m!.applicationProperties?.traceparent), new RegExp(`^00-${traceId}-`));
    const [create] = telemetry().spansNamed("create outbox");
    assert.equal(create?.spanContext().traceId, traceId);
    const sends = telemetry()
      .spansNamed(`send ${QUEUE}`)
      .filter((s) => s.spanContext().traceId === traceId);
    assert.equal(sends.length, 1);
    assert.equal(sends[0]!.parentSpanContext?.spanId, create.spanContext().spanId);
  });
});
