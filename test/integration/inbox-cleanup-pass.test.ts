import assert from "node:assert/strict";
import pg from "pg";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import { messageKey } from "../../src/inbox/message-key.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { Metric } from "../../src/telemetry/names.ts";
import { cleanupPass } from "../../src/worker/cleanup-pass.ts";
import { capturedLogs } from "../helpers/logs.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { histogramOf, metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";

/**
 * The worker's retention pass on PostgreSQL: what it deleted each pass, in the log and the metrics, and that a
 * pass leaves every marker younger than the retention (a redelivery of it is still a duplicate).
 */
describe("inbox cleanup pass: deleted markers reported in the log and the metrics", function () {
  const telemetry = useTelemetryCapture();
  let store: InboxStore;
  let admin: pg.Client;

  before(async function () {
    const url = await createTestDatabase("inbox_cleanup_pass");
    store = createPostgresInboxStore({ url, maxConnections: 2, preCheck: false });
    await store.migrate();
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
  });

  after(async function () {
    await store?.close();
    await admin?.end();
  });

  it("deletes the 4,500 markers past retention in three batches, keeps the young one, and says so", async function () {
    // The old markers first (the lowest Ids), as time makes them; then one the worker writes now.
    await admin.query(`INSERT INTO "InboxConsumer" ("Name") VALUES ('orders')`);
    await admin.query(
      `INSERT INTO "Inbox" ("ConsumerId", "MessageKey", "ReceivedSec")
       SELECT 1, decode(md5(g::text), 'hex'), floor(extract(epoch FROM now()) - 1577836800)::integer - 400 * 3600
       FROM generate_series(1, 4500) AS g`,
    );
    const young = { messageId: "young-1", consumer: "orders" };
    assert.equal((await store.process(young, () => Promise.resolve())).kind, "committed");
    const { logger, lines } = capturedLogs();

    assert.equal(await cleanupPass(store, 360 * 3_600_000, logger, 1), 4500);

    const pass = lines.find((l) => l.msg === "inbox cleanup pass");
    assert.ok(pass, JSON.stringify(lines));
    assert.equal(pass.deleted, 4500);
    // Ranges of 2,000: 2,000 + 2,000 + 500 (with the young one), then a range with nothing old ends the pass.
    assert.equal(pass.batches, 4);
    assert.equal(typeof pass.durationMs, "number");
    const data = await telemetry().collect();
    assert.equal(metricTotal(data, Metric.cleanupDeleted), 4500);
    assert.equal(histogramOf(data, Metric.cleanupDuration).count, 1);
    const left = await admin.query<{ key: Buffer }>(`SELECT "MessageKey" AS key FROM "Inbox"`);
    assert.deepEqual(
      left.rows.map((r) => r.key),
      [messageKey("young-1")],
    );
    assert.equal((await store.process(young, () => Promise.resolve())).kind, "duplicate");

    // A pass with nothing to delete is reported too: 0 deleted, one range read.
    assert.equal(await cleanupPass(store, 360 * 3_600_000, logger), 0);
    const second = lines.filter((l) => l.msg === "inbox cleanup pass")[1];
    assert.equal(second?.deleted, 0);
    assert.equal(second?.batches, 1);
  });

  it("the worker's paced pass: no faster than the pace allows, and the log says what the pace measured", async function () {
    this.timeout(20_000);
    await admin.query(`TRUNCATE "Inbox"`);
    await admin.query(
      `INSERT INTO "Inbox" ("ConsumerId", "MessageKey", "ReceivedSec")
       SELECT 1, decode(md5('p' || g::text), 'hex'), floor(extract(epoch FROM now()) - 1577836800)::integer - 400 * 3600
       FROM generate_series(1, 4500) AS g`,
    );
    const { logger, lines } = capturedLogs();
    // Nothing inserts meanwhile: the insert rate measured is 0, so the pass goes at its floor, 3,000 a second.
    const schedule = { batchRows: 1000, pace: { multiple: 4, minPerSecond: 3000 } };
    assert.equal(await cleanupPass(store, 360 * 3_600_000, logger, schedule), 4500);
    const pass = lines.filter((l) => l.msg === "inbox cleanup pass").at(-1);
    assert.ok(pass, JSON.stringify(lines));
    // 1,000 x 4, then 500, then an empty range: six statements.
    assert.equal(pass.batches, 6);
    // Each batch starts only when the slots of the deletes before it are used up: 4,500 at 3,000 a second is at
    // least 1.5 s, whatever the machine; a database that deletes 1,000 rows in under 333 ms leaves waits.
    assert.ok(Number(pass.perSecond) <= 3000, JSON.stringify(pass));
    assert.ok(Number(pass.waitedMs) > 0, JSON.stringify(pass));
    assert.equal(pass.insertPerSecond, 0);
    assert.equal(typeof pass.statementMs, "number");
  });

  it("a stop ends a paused pass after the batch under way; the next pass deletes the rest", async function () {
    this.timeout(20_000);
    await admin.query(`TRUNCATE "Inbox"`);
    await admin.query(
      `INSERT INTO "Inbox" ("ConsumerId", "MessageKey", "ReceivedSec")
       SELECT 1, decode(md5('s' || g::text), 'hex'), floor(extract(epoch FROM now()) - 1577836800)::integer - 400 * 3600
       FROM generate_series(1, 4500) AS g`,
    );
    const { logger } = capturedLogs();
    const stop = new AbortController();
    const batches: number[] = [];
    const deleted = await store.cleanup(360 * 3_600_000, 2000, {
      pauseMs: 60_000,
      signal: stop.signal,
      onBatch: (n) => {
        batches.push(n);
        stop.abort();
      },
    });
    // Aborted after the first batch: its minute's pause ends at once. What the batch deleted stays deleted.
    assert.equal(deleted, 2000);
    assert.deepEqual(batches, [2000]);
    assert.equal(await cleanupPass(store, 360 * 3_600_000, logger), 2500);
  });
  it("a pass whose connection drops part-way reports what it deleted with the error; the lock went with it", async function () {
    this.timeout(20_000);
    await admin.query(`TRUNCATE "Inbox"`);
    await admin.query(
      `INSERT INTO "Inbox" ("ConsumerId", "MessageKey", "ReceivedSec")
       SELECT 1, decode(md5('f' || g::text), 'hex'), floor(extract(epoch FROM now()) - 1577836800)::integer - 400 * 3600
       FROM generate_series(1, 4500) AS g`,
    );
    const { logger, lines } = capturedLogs();
    // Batches of 2,000 a second apart: after the first, the session that holds the cleanup lock is ended.
    const pass = cleanupPass(store, 360 * 3_600_000, logger, 1000).then(
      () => assert.fail("the pass should fail with its connection"),
      (error: unknown) => error,
    );
    const left = async () =>
      Number((await admin.query<{ n: string }>(`SELECT count(*) AS n FROM "Inbox"`)).rows[0]!.n);
    while ((await left()) === 4500) await new Promise((r) => setTimeout(r, 20));
    const ended = await admin.query(
      `SELECT pg_terminate_backend(pid) AS ended FROM pg_locks WHERE locktype = 'advisory' AND granted`,
    );
    assert.equal(ended.rowCount, 1, "one session holds the cleanup lock");
    assert.ok((await pass) instanceof Error);

    const failed = lines.find((l) => l.msg === "inbox cleanup pass");
    assert.ok(failed, JSON.stringify(lines));
    assert.equal(failed.level, "warn");
    assert.equal(failed.deleted, 2000, JSON.stringify(failed));
    assert.equal(typeof failed.error, "string");
    const data = await telemetry().collect();
    assert.equal(metricTotal(data, Metric.cleanupDeleted, { "sbinbox.outcome": "failed" }), 2000);
    assert.equal(histogramOf(data, Metric.cleanupDuration, { "sbinbox.outcome": "failed" }).count, 1);
    // The lock ended with its session: the next pass takes it and deletes the rest.
    assert.equal(await cleanupPass(store, 360 * 3_600_000, logger), 2500);
    assert.equal(lines.filter((l) => l.msg === "inbox cleanup pass").at(-1)?.skipped, undefined);
  });
});
