import assert from "node:assert/strict";
import pg from "pg";
import type { SqlExecutor } from "../../src/domain/sql.ts";
import type { InboxBatchItem } from "../../src/inbox/core.ts";
import { SavepointInBatchError } from "../../src/inbox/errors.ts";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import { postgresPoolConfig } from "../../src/inbox/postgres/pool.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const CONSUMER = "savepoints";

// Keyed handlers side by side in one batch share its transaction, their statements interleaved on the pipelining
// connection: one handler's ROLLBACK TO SAVEPOINT would undo the other's writes made since, and both would commit
// (found by the review of issue 29). So a handler beside others may not use savepoints, nor go on after a failed
// statement; the batch rolls back and each message goes alone, where its savepoints reach only its own writes.
describe("savepoints in a batch of keyed handlers (PostgreSQL, pipelined)", function () {
  this.timeout(60_000);
  let pool: pg.Pool;
  let store: ReturnType<typeof createPostgresInboxStore>;

  before(async () => {
    pool = new pg.Pool(postgresPoolConfig(await createTestDatabase("inbox_batch_savepoints"), 4));
    store = createPostgresInboxStore({ pool, preCheck: false });
    await store.migrate();
    await pool.query("CREATE TABLE a_rows (id text PRIMARY KEY)");
    await pool.query("CREATE TABLE b_rows (id text PRIMARY KEY)");
  });
  after(async () => {
    await pool.end();
  });
  beforeEach(async () => {
    await pool.query(`TRUNCATE a_rows, b_rows, "Inbox"`);
  });

  const markers = async (): Promise<string[]> =>
    (await pool.query<{ id: string }>(`SELECT "MessageId" AS id FROM "InboxMarkers" ORDER BY 1`)).rows.map(
      (r) => r.id,
    );
  const rows = async (table: "a_rows" | "b_rows"): Promise<string[]> =>
    (await pool.query<{ id: string }>(`SELECT id FROM ${table} ORDER BY 1`)).rows.map((r) => r.id);
  const writeB = async (tx: SqlExecutor): Promise<void> => {
    await tx.query("INSERT INTO b_rows VALUES ($1)", ["b1"]);
  };
  /** A batch of A (keyed "a") and B (keyed "b"): refused for A's savepoint, so both come back to go alone. */
  const refusedBatch = async (a: InboxBatchItem["work"]) => {
    const items: InboxBatchItem[] = [
      { messageId: "msg-a", work: a, keys: ["a"] },
      { messageId: "msg-b", work: writeB, keys: ["b"] },
    ];
    const result = await store.processBatch(CONSUMER, items);
    assert.deepEqual(
      result.outcomes.map((o) => o.kind),
      ["single", "single"],
    );
    assert.equal(result.reason, "handler_error");
    assert.ok(result.failure instanceof SavepointInBatchError, String(result.failure));
    assert.deepEqual(await markers(), []);
    assert.deepEqual(await rows("b_rows"), []);
    return { items, failure: result.failure };
  };
  /** What the batcher does with a batch's undecided messages: each through the single path. */
  const alone = async (items: readonly InboxBatchItem[]) =>
    Promise.all(items.map((i) => store.process({ messageId: i.messageId, consumer: CONSUMER }, i.work)));

  it("a ROLLBACK TO after a caught failure: refused, nothing commits, each then commits alone with its own writes", async () => {
    await pool.query("INSERT INTO a_rows VALUES ('taken')");
    // Correct on the single path: a savepoint, an insert that may meet an existing row, back to the savepoint.
    const a = async (tx: SqlExecutor): Promise<void> => {
      await tx.query("SAVEPOINT try_a");
      try {
        await tx.query("INSERT INTO a_rows VALUES ($1)", ["taken"]);
        await tx.query("RELEASE SAVEPOINT try_a");
      } catch {
        await tx.query("ROLLBACK TO SAVEPOINT try_a");
      }
      await tx.query("INSERT INTO a_rows VALUES ($1)", ["a1"]);
    };
    const { items, failure } = await refusedBatch(a);
    assert.equal(failure.statement, "SAVEPOINT");

    const single = await alone(items);
    assert.deepEqual(
      single.map((o) => o.kind),
      ["committed", "committed"],
    );
    assert.deepEqual(await markers(), ["msg-a", "msg-b"]);
    assert.deepEqual(await rows("a_rows"), ["a1", "taken"]);
    assert.deepEqual(await rows("b_rows"), ["b1"]);
  });

  it("a ROLLBACK TO by decision, no failure at all: refused too, and B's write is kept when each goes alone", async () => {
    const a = async (tx: SqlExecutor): Promise<void> => {
      await tx.query("SAVEPOINT maybe");
      await tx.query("INSERT INTO a_rows VALUES ($1)", ["undone"]);
      const { rows: decided } = await tx.query<{ keep: boolean }>("SELECT false AS keep");
      if (!decided[0]!.keep) await tx.query("ROLLBACK TO SAVEPOINT maybe");
    };
    const { items } = await refusedBatch(a);

    assert.deepEqual(
      (await alone(items)).map((o) => o.kind),
      ["committed", "committed"],
    );
    assert.deepEqual(await rows("a_rows"), [], "A's own write, rolled back to its savepoint alone");
    assert.deepEqual(await rows("b_rows"), ["b1"]);
  });

  it("a statement failure the handler caught (no savepoint) fails the batch: nothing commits", async () => {
    await pool.query("INSERT INTO a_rows VALUES ('taken')");
    const a = async (tx: SqlExecutor): Promise<void> => {
      await tx.query("INSERT INTO a_rows VALUES ($1)", ["taken"]).catch(() => undefined);
    };
    // B's insert goes out first, so it succeeds and only A's fails: the batch's failure is A's statement's own.
    const result = await store.processBatch(CONSUMER, [
      { messageId: "msg-b", work: writeB, keys: ["b"] },
      { messageId: "msg-a", work: a, keys: ["a"] },
    ]);
    assert.deepEqual(
      result.outcomes.map((o) => o.kind),
      ["single", "single"],
    );
    assert.equal(result.reason, "handler_error", "the handler's statement failed, not the commit");
    assert.equal((result.failure as { code?: string }).code, "23505", String(result.failure));
    assert.deepEqual(await markers(), []);
    assert.deepEqual(await rows("b_rows"), []);
  });

  it("an unkeyed handler runs with nothing beside it: its savepoints stay allowed in the batch", async () => {
    await pool.query("INSERT INTO a_rows VALUES ('taken')");
    const a = async (tx: SqlExecutor): Promise<void> => {
      await tx.query("SAVEPOINT try_a");
      await tx.query("INSERT INTO a_rows VALUES ($1)", ["taken"]).catch(async () => {
        await tx.query("ROLLBACK TO SAVEPOINT try_a");
      });
      await tx.query("INSERT INTO a_rows VALUES ($1)", ["a1"]);
    };
    const writeC = async (tx: SqlExecutor): Promise<void> => {
      await tx.query("INSERT INTO b_rows VALUES ($1)", ["c1"]);
    };
    const result = await store.processBatch(CONSUMER, [
      { messageId: "msg-b", work: writeB, keys: ["b"] },
      { messageId: "msg-a", work: a },
      { messageId: "msg-c", work: writeC, keys: ["c"] },
    ]);
    assert.equal(result.failure, undefined, String(result.failure));
    assert.deepEqual(
      result.outcomes.map((o) => o.kind),
      ["committed", "committed", "committed"],
    );
    assert.deepEqual(await markers(), ["msg-a", "msg-b", "msg-c"]);
    assert.deepEqual(await rows("a_rows"), ["a1", "taken"]);
    assert.deepEqual(await rows("b_rows"), ["b1", "c1"]);
  });
});
