import assert from "node:assert/strict";
import { context, createTraceState, ROOT_CONTEXT, trace, TraceFlags } from "@opentelemetry/api";
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import mssql from "mssql";
import pg from "pg";
import { ConfigError } from "../../src/domain/errors.ts";
import type { Dialect } from "../../src/domain/sql.ts";
import { enqueue, type OutboxEvent } from "../../src/outbox/enqueue.ts";
import { createPostgresOutboxStore } from "../../src/outbox/postgres/store.ts";
import { startRelay, type Relay, type RelayOptions } from "../../src/outbox/relay.ts";
import { createSqlServerOutboxStore } from "../../src/outbox/sqlserver/store.ts";
import type { OutboxStore } from "../../src/outbox/store.ts";
import { createOutboxSender } from "../../src/servicebus/outbox-sender.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";
import { scalar, type Backend, type BackendDatabase } from "./backends.ts";
import { holdDboOutbox } from "./outbox-dbo.ts";

const QUEUE = "outbox";

/**
 * The upstream side's SQL, per dialect, with the notes table in the run's schema. The outbox's own tables are where
 * the outbox puts them: dbo on SQL Server (see holdDboOutbox), the search path on PostgreSQL.
 */
const sqlFor: Record<Dialect, (schema: string | undefined) => Record<string, string>> = {
  postgres: (schema) => {
    const notes = schema === undefined ? "notes" : `"${schema}".notes`;
    return {
      createNotes: `CREATE TABLE ${notes} (id integer PRIMARY KEY, text text NOT NULL)`,
      insertNote: `INSERT INTO ${notes} (id, text) VALUES ($1, $2)`,
      countRows: `SELECT count(*)::int AS n FROM "Outbox"`,
      countUnsent: `SELECT count(*)::int AS n FROM "Outbox" WHERE "SentUtc" IS NULL`,
      countAttemptsNot: `SELECT count(*)::int AS n FROM "Outbox" WHERE "Attempts" <> $1`,
      countAttemptsAbove: `SELECT count(*)::int AS n FROM "Outbox" WHERE "Attempts" > $1`,
      setAsideError: `SELECT "Key" AS n, "Error" AS error FROM "Outbox" WHERE "SetAsideUtc" IS NOT NULL`,
      makeStale: `UPDATE "Outbox" SET "Attempts" = 1, "FirstAttemptUtc" = now() - interval '1 hour' WHERE "Key" = $1`,
      countVersions: `SELECT count(*)::int AS n FROM "SbOutboxSchemaVersion"`,
    };
  },
  sqlserver: (schema) => {
    const notes = `[${schema ?? "dbo"}].notes`;
    return {
      createNotes: `CREATE TABLE ${notes} (id int PRIMARY KEY, text nvarchar(200) NOT NULL)`,
      insertNote: `INSERT INTO ${notes} (id, text) VALUES (@p1, @p2)`,
      countRows: `SELECT COUNT(*) AS n FROM dbo.Outbox`,
      countUnsent: `SELECT COUNT(*) AS n FROM dbo.Outbox WHERE SentUtc IS NULL`,
      countAttemptsNot: `SELECT COUNT(*) AS n FROM dbo.Outbox WHERE Attempts <> @p1`,
      countAttemptsAbove: `SELECT COUNT(*) AS n FROM dbo.Outbox WHERE Attempts > @p1`,
      setAsideError: `SELECT [Key] AS n, Error AS error FROM dbo.Outbox WHERE SetAsideUtc IS NOT NULL`,
      makeStale: `UPDATE dbo.Outbox SET Attempts = 1, FirstAttemptUtc = DATEADD(hour, -1, SYSUTCDATETIME()) WHERE [Key] = @p1`,
      countVersions: `SELECT COUNT(*) AS n FROM dbo.SbOutboxSchemaVersion`,
    };
  },
};

/** Runs upstream transactions the way an upstream service does: its own driver, its own transaction. */
export interface Upstream {
  /** One transaction: a business row per id, the events, then commit or roll back. */
  run(ids: number[], outcome?: "commit" | "rollback", events?: OutboxEvent[]): Promise<void>;
  openStore(): OutboxStore;
  close(): Promise<void>;
}

function noteEvents(ids: number[]): OutboxEvent[] {
  return ids.map((id) => ({ type: "NoteCreated", key: String(id), body: { noteId: id } }));
}

export async function upstreamFor(db: BackendDatabase): Promise<Upstream> {
  const target = db.target;
  const sql = { [target.kind]: sqlFor[target.kind](db.schema) } as Record<Dialect, Record<string, string>>;
  if (target.kind === "postgres") {
    const pool = new pg.Pool({ connectionString: target.url, max: 6 });
    return {
      async run(ids, outcome = "commit", events = noteEvents(ids)) {
        const client = await pool.connect();
        try {
          await client.query("BEGIN");
          for (const id of ids) await client.query(sql.postgres.insertNote!, [id, `n${id}`]);
          await enqueue(client, events);
          await client.query(outcome === "commit" ? "COMMIT" : "ROLLBACK");
        } finally {
          client.release();
        }
      },
      openStore: () => createPostgresOutboxStore({ url: target.url }),
      close: () => pool.end(),
    };
  }
  const pool = new mssql.ConnectionPool(target.config);
  await pool.connect();
  return {
    async run(ids, outcome = "commit", events = noteEvents(ids)) {
      const tx = new mssql.Transaction(pool);
      await tx.begin();
      for (const id of ids)
        await tx.request().input("p1", id).input("p2", `n${id}`).query(sql.sqlserver.insertNote!);
      await enqueue(tx, events);
      if (outcome === "commit") await tx.commit();
      else await tx.rollback();
    },
    openStore: () => createSqlServerOutboxStore({ config: target.config }),
    close: () => pool.close(),
  };
}

/** What a test's set-up has opened so far: a set-up that failed half-way leaves the rest unset. */
export interface OpenedOutbox {
  db?: BackendDatabase;
  upstream?: Upstream;
  store?: OutboxStore;
  releaseOutbox?: () => Promise<void>;
}

/** A test's database, dbo's outbox held (outbox-dbo.ts), its upstream and its migrated store; noted in `opened`. */
export async function openOutbox(
  backend: Backend,
  label: string,
  opened: OpenedOutbox,
): Promise<{ db: BackendDatabase; upstream: Upstream; store: OutboxStore }> {
  const db = (opened.db = await backend.database(label));
  opened.releaseOutbox = await holdDboOutbox(db);
  const upstream = (opened.upstream = await upstreamFor(db));
  const store = (opened.store = upstream.openStore());
  await store.migrate();
  return { db, upstream, store };
}

/** Closes `first`, then what openOutbox opened, each step even when one before it failed; throws the first failure. */
export async function closeOutbox(
  opened: OpenedOutbox,
  first: (() => Promise<unknown> | undefined)[],
): Promise<void> {
  const steps: (() => Promise<unknown> | undefined)[] = [
    ...first,
    () => opened.store?.close(),
    () => opened.upstream?.close(),
    () => opened.releaseOutbox?.(),
    () => opened.db?.dispose(),
  ];
  const failures: unknown[] = [];
  for (const step of steps) await Promise.resolve(step()).catch((error: unknown) => failures.push(error));
  if (failures.length > 0) throw failures[0];
}

/** The outbox's behaviour, the same on every database. */
export function outboxConformance(backend: Backend): void {
  describe(`outbox and relay on ${backend.name} (real SDK, local broker)`, function () {
    const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));
    const telemetry = useTelemetryCapture();
    let q = sqlFor[backend.dialect](undefined);
    let db: BackendDatabase;
    let upstream: Upstream;
    let store: OutboxStore;
    let opened: OpenedOutbox = {};
    const relays: Relay[] = [];
    const count = async (statement: string, params?: unknown[]): Promise<number> =>
      scalar(db.raw, statement, params);

    beforeEach(async function () {
      ({ db, upstream, store } = await openOutbox(
        backend,
        `outbox ${this.currentTest?.title ?? ""}`,
        opened,
      ));
      q = sqlFor[backend.dialect](db.schema);
      await db.raw.query(q.createNotes!);
      await receive(0, 0); // messages an earlier test left behind
    });

    afterEach(async function () {
      const was = opened;
      opened = {};
      await closeOutbox(was, [() => Promise.all(relays.splice(0).map((r) => r.stop()))]);
    });

    /**
     * Every row's Attempts is `tries`; when `releasedUnsent` batches were released unsent (their lease ran short
     * before the send could start, each claimed once more), at most that many more.
     */
    async function assertAttempts(tries: number, releasedUnsent: number, what: string): Promise<void> {
      if (releasedUnsent === 0) assert.equal(await count(q.countAttemptsNot!, [tries]), 0, what);
      else
        assert.equal(
          await count(q.countAttemptsAbove!, [tries + releasedUnsent]),
          0,
          `${what}, but for ${releasedUnsent} batches released unsent`,
        );
    }

    async function relay(options: Partial<RelayOptions> = {}): Promise<Relay> {
      const sender = createOutboxSender({ client: fixture.client, queue: QUEUE });
      // A batch starts only inside the first half of its lease (the send's own bound), so the lease is long enough
      // for a claim on a loaded machine (a first statement on a fresh connection can take most of a second) to start
      // its send: a lease that runs short releases the batch and claims it again, and those tests are about other
      // things.
      const r = await startRelay({ store, sender, pollIntervalMs: 100, leaseMs: 3_000, ...options });
      relays.push(r);
      return r;
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

    const idOf = (m: ServiceBusReceivedMessage): number =>
      (JSON.parse(Buffer.from(m.body as Uint8Array).toString("utf8")) as { noteId: number }).noteId;

    it("migrates once when two instances run it together, and again as a no-op", async function () {
      const other = upstream.openStore();
      try {
        const again = await Promise.all([store.migrate(), other.migrate()]);
        assert.deepEqual(again, [{ applied: [] }, { applied: [] }]);
      } finally {
        await other.close();
      }
      assert.equal(await count(q.countVersions!), 2, "0001_outbox and 0002_outbox_session");
    });

    it("sends nothing for a rolled-back upstream transaction, and the committed one once", async function () {
      await upstream.run([1, 2], "rollback");
      await upstream.run([3]);
      await relay();
      const got = await receive(1);
      assert.deepEqual(got.map(idOf), [3]);
      assert.equal(got[0]!.messageId, deriveMessageId("NoteCreated", "3"));
      assert.equal(got[0]!.subject, "NoteCreated");
      assert.equal(await count(q.countRows!), 1, "the rolled-back rows never existed");
    });

    it("a relay that dies between send and mark causes a resend the broker drops: one delivery", async function () {
      await upstream.run([10, 11, 12]);
      const dropped = fixture.broker.counts(QUEUE).duplicatesDropped;
      // Batches released unsent because their lease ran short before the send could start (a slow claim on a
      // loaded machine): each is claimed once more, and nothing crashes for them.
      let releasedUnsent = 0;
      const counting = (sent: readonly string[]) => {
        if (sent.length === 0) releasedUnsent += 1;
        return sent.length > 0;
      };
      const crashed = await relay({
        afterSend: (sent) => {
          if (counting(sent)) throw new Error("crash between send and mark");
        },
        retryDelayMs: 60_000,
        duplicateWindowMs: 600_000,
      });
      await waitUntil(() => fixture.broker.counts(QUEUE).active >= 3, "first copies");
      await crashed.stop();
      assert.equal(await count(q.countUnsent!), 3, "sent but not marked");
      const restarted = await relay({ afterSend: (sent) => void counting(sent) });
      await waitUntil(() => restarted.counters.sent === 3, "the resend after the lease", 10_000);
      assert.equal(fixture.broker.counts(QUEUE).duplicatesDropped, dropped + 3);
      assert.deepEqual((await receive(3)).map(idOf), [10, 11, 12]);
      await assertAttempts(2, releasedUnsent, "each row was tried twice");
    });

    it("two relays at once send every row exactly once", async function () {
      for (let t = 0; t < 20; t++)
        await upstream.run(Array.from({ length: 10 }, (_, i) => 1000 + t * 10 + i));
      const dropped = fixture.broker.counts(QUEUE).duplicatesDropped;
      // Which rows each relay sent, and how many of its batches it released unsent because their lease ran short
      // before the send could start (a slow first claim on a loaded machine): those rows are claimed once more.
      const sentBy = [new Set<string>(), new Set<string>()];
      let releasedUnsent = 0;
      const watching = (i: number): Partial<RelayOptions> => ({
        batchSize: 7,
        afterSend: (ids) => {
          if (ids.length === 0) releasedUnsent += 1;
          for (const id of ids) sentBy[i]!.add(id);
        },
      });
      const [a, b] = await Promise.all([relay(watching(0)), relay(watching(1))]);
      await waitUntil(() => a.counters.sent + b.counters.sent === 200, "all 200 rows sent", 20_000);
      assert.equal(fixture.broker.counts(QUEUE).duplicatesDropped, dropped, "no row was sent twice");
      const got = await receive(200);
      assert.equal(got.length, 200);
      assert.equal(new Set(got.map((m) => m.messageId)).size, 200);
      const both = [...sentBy[0]!].filter((id) => sentBy[1]!.has(id));
      assert.deepEqual(both, [], "a row was sent by both relays");
      assert.equal(sentBy[0]!.size + sentBy[1]!.size, 200, "the relays' sends add up to the 200 rows");
      await assertAttempts(1, releasedUnsent, "each row was claimed once");
    });

    it("sets aside a row the broker refuses and sends the rows behind it", async function () {
      await upstream.run([20, 21, 22], "commit", [
        { type: "NoteCreated", key: "20", body: { noteId: 20 } },
        { type: "NoteCreated", key: "21", body: { noteId: 21, text: "x".repeat(300 * 1024) } },
        { type: "NoteCreated", key: "22", body: { noteId: 22 } },
      ]);
      const r = await relay();
      await waitUntil(() => r.counters.sent === 2 && r.counters.setAside === 1, "two sent, one set aside");
      assert.deepEqual((await receive(2)).map(idOf), [20, 22]);
      const { rows } = await db.raw.query<{ n: string; error: string }>(q.setAsideError!);
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.n, "21");
      assert.match(rows[0]!.error, /MessageSizeExceeded/);
      const report = await r.readiness();
      assert.equal(report.ready, true, "a set-aside row is counted, not a readiness failure");
      assert.equal(report.outbox, "ok");
      assert.equal(r.status?.setAside, 1);
    });

    it("sends in commit order, across batches", async function () {
      const committed: number[] = [];
      for (let t = 0; t < 8; t++) {
        const ids = [t * 3 + 102, t * 3 + 100, t * 3 + 101]; // not sorted: the order is the enqueue order
        await upstream.run(ids);
        committed.push(...ids);
      }
      await relay({ batchSize: 5 });
      assert.deepEqual((await receive(24)).map(idOf), committed);
    });

    it("enqueues 600 events in one transaction (inserts of 2,000 parameters and more): order and bodies kept", async function () {
      // Bodies the driver and server must carry as given: quotes, backslashes, a newline, non-ASCII text.
      const events = Array.from({ length: 600 }, (_, i) => ({
        type: "NoteCreated",
        key: `bulk-${i}`,
        body: { noteId: 5000 + i, text: `"quoted" \\ back\\slash \n line 'single' é ☃ ${i}` },
      }));
      await upstream.run([], "commit", events);
      const r = await relay({ batchSize: 100 });
      await waitUntil(() => r.counters.sent === 600, "all 600 rows sent", 30_000);
      const got = await receive(600);
      assert.deepEqual(
        got.map((m) => JSON.parse(Buffer.from(m.body as Uint8Array).toString("utf8")) as unknown),
        events.map((e) => e.body),
      );
    });

    it("leaves a row first tried before the window alone and reports it, without failing readiness", async function () {
      await upstream.run([40, 41]);
      await db.raw.query(q.makeStale!, ["40"]);
      const errors: string[] = [];
      const r = await relay({ onError: (_error, during) => errors.push(during) });
      await waitUntil(() => r.counters.sent === 1, "the fresh row sent");
      assert.deepEqual((await receive(1)).map(idOf), [41]);
      const report = await r.readiness();
      assert.equal(
        report.ready,
        true,
        "a stale row is an operator's task, not a reason to replace the instance",
      );
      assert.equal(report.outbox, "stale");
      assert.ok(errors.includes("stale"), "logged");
      assert.equal(r.status?.stale, 1);
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
      const span = trace.getTracer("upstream").startSpan("upstream transaction");
      await context.with(trace.setSpan(context.active(), span), () => upstream.run([50]));
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

    it("stores the upstream tracestate with the row and sends it", async function () {
      const parent = trace.setSpanContext(ROOT_CONTEXT, {
        traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
        spanId: "00f067aa0ba902b7",
        traceFlags: TraceFlags.SAMPLED,
        isRemote: true,
        traceState: createTraceState("vendor=abc,other=1"),
      });
      await context.with(parent, () => upstream.run([51]));
      await relay();
      const [m] = await receive(1);
      assert.match(String(m!.applicationProperties?.traceparent), /^00-4bf92f3577b34da6a3ce929d0e0e4736-/);
      assert.equal(m!.applicationProperties?.tracestate, "vendor=abc,other=1");
    });
  });
}
