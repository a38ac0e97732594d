import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import pg from "pg";
import { createPostgresInboxStore, POSTGRES_MIGRATIONS_DIR } from "../../src/inbox/postgres/adapter.ts";
import { postgresSql } from "../../src/inbox/postgres/statements.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

/**
 * Migration 0002 on an inbox that has markers (PostgreSQL): an inbox at version 1, written as the previous
 * version's workers write it, then `migrate`. The old markers must still stop their redeliveries.
 */
describe("inbox migration 0002 (smaller markers) on an inbox with markers", function () {
  let url: string;
  let admin: pg.Client;
  let store: InboxStore;

  before(async function () {
    url = await createTestDatabase("inbox_migrate_0002");
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
    // Version 1 as `sbinbox migrate` left it before 0002 existed.
    const sql = postgresSql();
    await admin.query(sql.CREATE_VERSION_TABLE);
    await admin.query(await readFile(join(POSTGRES_MIGRATIONS_DIR, "0001_inbox.sql"), "utf8"));
    await admin.query(sql.RECORD_VERSION, [1, "0001_inbox"]);
    // The previous version's markers, with its own statements' columns: done, an open claim, one past retention.
    await admin.query(
      `INSERT INTO "Inbox" ("MessageId", "Consumer", "ProcessedUtc") VALUES ('old-done', 'orders', now()),
         ('OLD-UPPER-0F8FAD5B-D9CB-469F-A165-70867728950E', 'orders', now())`,
    );
    await admin.query(`INSERT INTO "Inbox" ("MessageId", "Consumer") VALUES ('old-open', 'orders')`);
    await admin.query(
      `INSERT INTO "Inbox" ("MessageId", "Consumer", "ReceivedUtc", "ProcessedUtc")
       VALUES ('old-aged', 'orders', now() - interval '400 hours', now() - interval '400 hours')`,
    );
    await admin.query(`CREATE TABLE effects (message_id text NOT NULL)`);
    store = createPostgresInboxStore({ url, maxConnections: 4, preCheck: false });
  });

  after(async function () {
    await store?.close();
    await admin?.end();
  });

  const effect = (id: string) => async (tx: { query(sql: string, params?: unknown[]): Promise<unknown> }) => {
    await tx.query(`INSERT INTO effects (message_id) VALUES ($1)`, [id]);
  };
  const effects = async (id: string) =>
    Number(
      (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM effects WHERE message_id = $1`, [id]))
        .rows[0]!.n,
    );

  it("applies 0002 alone, keeps the old table as InboxLegacy with its markers", async function () {
    const result = await store.migrate();
    assert.deepEqual(result.applied, ["0002_inbox_markers"]);
    const legacy = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM "InboxLegacy"`);
    assert.equal(legacy.rows[0]!.n, 4);
    assert.equal((await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM "Inbox"`)).rows[0]!.n, 0);
  });

  it("a redelivery of a message marked before the move is a duplicate, alone and in a batch", async function () {
    assert.deepEqual(await store.process({ messageId: "old-done", consumer: "orders" }, effect("old-done")), {
      kind: "duplicate",
    });
    const upper = "OLD-UPPER-0F8FAD5B-D9CB-469F-A165-70867728950E";
    const batch = await store.processBatch!("orders", [
      { messageId: upper, work: effect(upper) },
      { messageId: "new-1", work: effect("new-1") },
    ]);
    assert.deepEqual(
      batch.outcomes.map((o) => o.kind),
      ["duplicate", "committed"],
    );
    assert.equal(await effects("old-done"), 0);
    assert.equal(await effects(upper), 0);
    assert.equal(await effects("new-1"), 1);
    assert.equal((await store.claim({ messageId: "old-done", consumer: "orders" })).kind, "duplicate");
    // Another consumer's copy of the same message is its own: not stopped by the orders consumer's marker.
    assert.deepEqual(
      await store.process({ messageId: "old-done", consumer: "billing" }, effect("old-done")),
      {
        kind: "committed",
      },
    );
  });

  it("a two-phase claim left open by the previous version is busy until swept, then claimed afresh", async function () {
    // Its holder may be performing the external effect: a redelivery must not perform it again at once.
    assert.equal((await store.claim({ messageId: "old-open", consumer: "orders" })).kind, "busy");
    assert.equal(await store.sweepStaleClaims(3_600_000), 0);
    assert.equal(await store.sweepStaleClaims(0), 1);
    const claim = await store.claim({ messageId: "old-open", consumer: "orders" });
    assert.equal(claim.kind, "claimed");
    await store.markProcessed(
      { messageId: "old-open", consumer: "orders" },
      claim.kind === "claimed" ? claim.claimId : "",
    );
    assert.equal(await store.isProcessed({ messageId: "old-open", consumer: "orders" }), true);
  });

  it("a worker of the previous version fails on the new table instead of writing a marker nobody reads", async function () {
    await assert.rejects(
      admin.query(
        `INSERT INTO "Inbox" ("MessageId", "Consumer", "ProcessedUtc") VALUES ('late', 'orders', now())`,
      ),
      (error: { code?: string }) => error.code === "42703",
    );
  });

  it("retention empties the legacy table too; its markers past retention go, the others stay", async function () {
    const deleted = await store.cleanup(360 * 3_600_000);
    assert.equal(deleted, 1);
    const left = await admin.query<{ id: string }>(`SELECT "MessageId" AS id FROM "InboxLegacy" ORDER BY 1`);
    assert.deepEqual(
      left.rows.map((r) => r.id),
      ["OLD-UPPER-0F8FAD5B-D9CB-469F-A165-70867728950E", "old-done"],
    );
    // The remaining markers still count after the pass re-read whether the table has rows.
    assert.equal(
      (await store.process({ messageId: "old-done", consumer: "orders" }, effect("old-done"))).kind,
      "duplicate",
    );
  });

  it("a new inbox gets no legacy table: 0002 drops it when nothing was ever received", async function () {
    const fresh = await createTestDatabase("inbox_migrate_0002_fresh");
    const other = createPostgresInboxStore({ url: fresh, maxConnections: 2 });
    try {
      assert.deepEqual((await other.migrate()).applied, ["0001_inbox", "0002_inbox_markers"]);
      const client = new pg.Client({ connectionString: fresh });
      await client.connect();
      try {
        const found = await client.query<{ found: boolean }>(
          `SELECT to_regclass('"InboxLegacy"') IS NOT NULL AS found`,
        );
        assert.equal(found.rows[0]!.found, false);
      } finally {
        await client.end();
      }
    } finally {
      await other.close();
    }
  });
});
