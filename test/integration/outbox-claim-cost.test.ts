import assert from "node:assert/strict";
import pg from "pg";
import { createPostgresOutboxStore } from "../../src/outbox/postgres/store.ts";
import { statements } from "../../src/outbox/postgres/statements.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

interface PlanNode {
  "Relation Name"?: string;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  "Rows Removed by Filter"?: number;
  "Rows Removed by Index Recheck"?: number;
  Plans?: PlanNode[];
}

/** Rows of "Outbox" the claim's scans read: returned by a scan node, or read and removed by its filter. */
function outboxRowsRead(node: PlanNode): number {
  const loops = node["Actual Loops"] ?? 1;
  const own =
    node["Relation Name"] === "Outbox"
      ? ((node["Actual Rows"] ?? 0) +
          (node["Rows Removed by Filter"] ?? 0) +
          (node["Rows Removed by Index Recheck"] ?? 0)) *
        loops
      : 0;
  return own + (node.Plans ?? []).reduce((sum, child) => sum + outboxRowsRead(child), 0);
}

/**
 * A key's backlog must not make each claim read it (only its head may leave): a claim that read every row of a hot
 * key made draining n rows of one key cost n claims of n rows each. Counted in rows read (EXPLAIN ANALYZE), not time.
 */
describe("outbox claim on PostgreSQL: rows read do not grow with a key's backlog", function () {
  this.timeout(120_000);
  let pool: pg.Pool;

  before(async () => {
    pool = new pg.Pool({ connectionString: await createTestDatabase("outbox claim cost"), max: 2 });
    await createPostgresOutboxStore({ pool }).migrate();
  });
  after(() => pool.end());

  /** Runs one claim of `batch` rows under EXPLAIN ANALYZE: the rows it claimed and the Outbox rows it read. */
  async function claim(batch: number): Promise<{ claimed: number; read: number }> {
    const { rows } = await pool.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${statements.claim}`,
      [batch, 60_000, 3_600_000],
    );
    const plan = rows[0]!["QUERY PLAN"][0].Plan;
    return { claimed: plan["Actual Rows"] ?? 0, read: outboxRowsRead(plan) };
  }

  async function fill(hot: number, keys: number, plain: number): Promise<void> {
    await pool.query(`TRUNCATE "Outbox"`);
    // The hot key's backlog first, so that every other row comes after it in Id order.
    await pool.query(
      `INSERT INTO "Outbox" ("MessageId","Type","Key","Body","SessionId")
       SELECT 'h' || g, 'T', 'h' || g, '{}', 'hot' FROM generate_series(1, $1::int) g`,
      [hot],
    );
    await pool.query(
      `INSERT INTO "Outbox" ("MessageId","Type","Key","Body","SessionId")
       SELECT 'k' || g, 'T', 'k' || g, '{}', 'key-' || g FROM generate_series(1, $1::int) g`,
      [keys],
    );
    await pool.query(
      `INSERT INTO "Outbox" ("MessageId","Type","Key","Body")
       SELECT 'p' || g, 'T', 'p' || g, '{}' FROM generate_series(1, $1::int) g`,
      [plain],
    );
    await pool.query(`ANALYZE "Outbox"`);
  }

  it("one hot key: the claim takes its head and reads as many rows at 20,000 behind it as at 20", async () => {
    const read: number[] = [];
    for (const backlog of [20, 20_000]) {
      await fill(backlog, 0, 0);
      const first = await claim(100);
      assert.equal(first.claimed, 1, "only the key's head is claimable");
      read.push(first.read);
    }
    console.log(`      Outbox rows read by a claim, hot key of 20 / 20,000: ${read.join(" / ")}`);
    assert.ok(read[1]! <= read[0]! + 5, `rows read grew with the backlog: ${read.join(" -> ")}`);
    assert.ok(read[1]! < 50, `a claim read ${read[1]} rows behind one head`);
  });

  it("behind a hot key's 20,000 rows, a claim of 100 takes 100 keys' heads and rows without a key, reading about that many", async () => {
    await fill(20_000, 60, 60);
    const { claimed, read } = await claim(100);
    console.log(
      `      claim of 100 behind a hot key of 20,000: ${claimed} claimed, ${read} Outbox rows read`,
    );
    assert.equal(claimed, 100);
    // Heads of 61 keys (hot included) and up to 100 rows without a key are candidates: a few hundred reads at most.
    assert.ok(read < 600, `a claim read ${read} rows`);
  });
});
