import assert from "node:assert/strict";
import { copyFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { PostgresDriver } from "../../src/inbox/postgres/adapter.ts";
import { enqueue, type OutboxEvent } from "../../src/outbox/enqueue.ts";
import { createPostgresOutboxStore, POSTGRES_OUTBOX_MIGRATIONS } from "../../src/outbox/postgres/store.ts";
import { statements } from "../../src/outbox/postgres/statements.ts";
import { OutboxStore } from "../../src/outbox/store.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

/**
 * The library upgraded before its database (docs/outbox.md, Upgrading): at migration 0001 there is no SessionId
 * column. Enqueues without session keys must go on working; one with a key must name the migration to run.
 */
describe("outbox: enqueue on a database still at migration 0001", function () {
  this.timeout(60_000);
  let pool: pg.Pool;
  let dir: string;

  before(async () => {
    pool = new pg.Pool({ connectionString: await createTestDatabase("outbox upgrade"), max: 3 });
    dir = await mkdtemp(join(tmpdir(), "sbinbox-outbox-0001-"));
    const source = fileURLToPath(new URL("../../src/outbox/postgres/migrations/", import.meta.url));
    await copyFile(join(source, "0001_outbox.sql"), join(dir, "0001_outbox.sql"));
    await new OutboxStore(new PostgresDriver({ pool }), statements, {
      ...POSTGRES_OUTBOX_MIGRATIONS,
      dir,
    }).migrate();
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM information_schema.columns WHERE table_name = 'Outbox' AND column_name = 'SessionId'`,
    );
    assert.equal(rows[0]!.n, 0, "the database is at 0001: no SessionId column");
  });
  after(async () => {
    await pool.end();
    await rm(dir, { recursive: true, force: true });
  });

  async function inTransaction(events: OutboxEvent[]): Promise<unknown> {
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      try {
        await enqueue(client, events);
      } catch (error) {
        await client.query("ROLLBACK");
        return error;
      }
      await client.query("COMMIT");
      return undefined;
    } finally {
      client.release();
    }
  }

  it("enqueues events without a session key", async () => {
    const error = await inTransaction([
      { type: "Plain", key: "1", body: { n: 1 } },
      { type: "Plain", key: "2", body: { n: 2 } },
    ]);
    assert.equal(error, undefined);
    const { rows } = await pool.query<{ key: string }>(`SELECT "Key" AS key FROM "Outbox" ORDER BY "Id"`);
    assert.deepEqual(
      rows.map((r) => r.key),
      ["1", "2"],
    );
  });

  it("refuses an event with a session key, naming the migration to run, and writes none of the call", async () => {
    const error = await inTransaction([
      { type: "Plain", key: "3", body: {} },
      { type: "Keyed", key: "4", sessionId: "account-1", body: {} },
    ]);
    assert.ok(error instanceof Error);
    assert.match(error.message, /0002_outbox_session/);
    assert.match(error.message, /sbinbox migrate --outbox/);
    assert.match(String((error.cause as Error).message), /SessionId/);
    const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "Outbox"`);
    assert.equal(rows[0]!.n, 2);
  });

  it("after 0002 the same call enqueues, and the rows from before have no key", async () => {
    const store = createPostgresOutboxStore({ pool });
    await store.migrate();
    const error = await inTransaction([{ type: "Keyed", key: "4", sessionId: "account-1", body: {} }]);
    assert.equal(error, undefined);
    const { rows } = await pool.query<{ key: string; sessionId: string | null }>(
      `SELECT "Key" AS key, "SessionId" AS "sessionId" FROM "Outbox" ORDER BY "Id"`,
    );
    assert.deepEqual(rows, [
      { key: "1", sessionId: null },
      { key: "2", sessionId: null },
      { key: "4", sessionId: "account-1" },
    ]);
  });
});
