import assert from "node:assert/strict";
import type pg from "pg";
import type { Database } from "../../src/app/database.ts";
import type { SqlExecutor } from "../../src/domain/sql.ts";
import { accountSql } from "../../src/example/index.ts";
import type { InboxBatchItem } from "../../src/inbox/core.ts";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import { Batcher, type BatchOutcome } from "../../src/worker/batcher.ts";
import { countingPool, type RoundTrips } from "../helpers/counting-pool.ts";
import { creditsPerMessage, exampleDatabase } from "../helpers/worker.ts";

/** The example handler's two statements for one credit. */
const credit =
  (id: string, account: string, pauseMs = 0) =>
  async (tx: SqlExecutor): Promise<void> => {
    await tx.query(accountSql.addToBalance.postgres, [account, 1]);
    // A pause while the account's row is held: batches that meet on rows then meet on them every time.
    if (pauseMs > 0) await tx.query("SELECT pg_sleep($1)", [pauseMs / 1000]);
    await tx.query(accountSql.insertCredit.postgres, [id, account, 1]);
  };

describe("a batch's handlers with disjoint keys, pipelined (real PostgreSQL, round trips counted on the client)", function () {
  this.timeout(60_000);
  let db: Database & { url: string };
  const pools: pg.Pool[] = [];

  before(async () => {
    db = await exampleDatabase("batch_keys_round_trips");
  });
  after(async () => {
    for (const pool of pools) await pool.end();
    await db.close();
  });

  /** One batch of 16 credits of 16 accounts through the store; its round trips. */
  async function batchOf16(prefix: string, keyed: boolean, pipeline: boolean): Promise<RoundTrips> {
    const { pool, counted } = countingPool(db.url, 2, pipeline);
    pools.push(pool);
    const store = createPostgresInboxStore({ pool, preCheck: false });
    const items: InboxBatchItem[] = Array.from({ length: 16 }, (_, i) => ({
      messageId: `${prefix}-${i}`,
      // As the worker marks a message on its first delivery: the handlers start beside the marker insert.
      firstDelivery: true,
      work: credit(`${prefix}-${i}`, `${prefix}-acct-${i}`),
      ...(keyed ? { keys: [`account:${prefix}-acct-${i}`] } : {}),
    }));
    const result = await store.processBatch(`rt-${prefix}`, items);
    assert.equal(result.failure, undefined, String(result.failure));
    assert.deepEqual(new Set(result.outcomes.map((o) => o.kind)), new Set(["committed"]));
    const perMessage = await creditsPerMessage(db);
    for (const item of items) assert.equal(perMessage.get(item.messageId), 1, item.messageId);
    return { ...counted };
  }

  it("16 messages with disjoint keys: at most 3 round trips (0.19 a message), where one after another takes 33", async function () {
    const keyed = await batchOf16("keyed", true, true);
    const unkeyed = await batchOf16("unkeyed", false, true);
    // BEGIN with the marker insert and the first handler's first statement (it does not wait for the insert's
    // answer), the other 31 handler statements one at a time, COMMIT.
    assert.deepEqual(unkeyed, { statements: 35, roundTrips: 33 }, "unkeyed: the handlers one after another");
    assert.equal(keyed.statements, 35);
    // BEGIN with the marker insert and the 16 first statements; the 16 second ones; COMMIT.
    assert.ok(keyed.roundTrips <= 3, `keyed: ${keyed.roundTrips} round trips for 16 messages`);
  });

  it("on a connection that does not pipeline (no concurrent statements, as on SQL Server): one after another", async function () {
    const keyed = await batchOf16("serial", true, false);
    // Without pipelining BEGIN is a round trip of its own too.
    assert.deepEqual(keyed, { statements: 35, roundTrips: 35 });
  });
});

describe("batches in flight with keys over shared rows (real PostgreSQL)", function () {
  this.timeout(120_000);
  let db: Database & { url: string };

  before(async () => {
    db = await exampleDatabase("batch_keys_deadlocks");
  });
  after(async () => {
    await db.close();
  });

  const ACCOUNTS = 5;
  const PER_ROUND = 16;

  /**
   * Rounds of 16 credits over 5 accounts in a random order, given at once to a batcher with batches of 4 and 4 in
   * flight; each handler holds its account's row for 2 ms. Returns every batch's outcome.
   */
  async function rounds(
    label: string,
    n: number,
    keys: (id: string, account: string) => readonly string[],
    until?: (outcomes: readonly BatchOutcome[]) => boolean,
  ): Promise<{ outcomes: BatchOutcome[]; ids: string[] }> {
    const outcomes: BatchOutcome[] = [];
    const batcher = new Batcher({
      store: db.store,
      consumer: label,
      maxSize: 4,
      waitMs: 5,
      maxInFlight: 4,
      onBatch: (_size, outcome) => outcomes.push(outcome),
    });
    const ids: string[] = [];
    for (let round = 0; round < n && !(until?.(outcomes) ?? false); round += 1) {
      const settled = Array.from({ length: PER_ROUND }, (_, i) => {
        const id = `${label}-${round}-${i}`;
        const account = `${label}-${Math.floor(Math.random() * ACCOUNTS)}`;
        ids.push(id);
        return batcher.process({ messageId: id, consumer: label }, credit(id, account, 2), {
          keys: keys(id, account),
        });
      });
      const results = await Promise.all(settled);
      assert.deepEqual(new Set(results.map((r) => r.kind)), new Set(["committed"]));
    }
    const perMessage = await creditsPerMessage(db);
    for (const id of ids) assert.equal(perMessage.get(id), 1, id);
    return { outcomes, ids };
  }

  it("keyed by the account they touch: 0 deadlocks over 25 rounds of overlapping accounts", async function () {
    const { outcomes, ids } = await rounds("keyed", 25, (_id, account) => [`account:${account}`]);
    assert.equal(ids.length, 25 * PER_ROUND);
    assert.ok(outcomes.length >= 25 * (PER_ROUND / 4), `${outcomes.length} batches`);
    assert.equal(outcomes.filter((o) => o === "deadlock").length, 0, outcomes.join(","));
    assert.equal(outcomes.filter((o) => o !== "committed").length, 0, outcomes.join(","));
  });

  it("the same workload keyed by MessageId (keys that do not name the rows) meets deadlocks, each message still applied once", async function () {
    const { outcomes } = await rounds(
      "lying",
      10,
      (id) => [`message:${id}`],
      (seen) => seen.includes("deadlock"),
    );
    assert.ok(outcomes.includes("deadlock"), `a deadlock within 10 rounds (${outcomes.join(",")})`);
  });
});
