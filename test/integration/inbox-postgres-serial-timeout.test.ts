import assert from "node:assert/strict";
import pg from "pg";
import { createPostgresInboxStore, PostgresDriver } from "../../src/inbox/postgres/adapter.ts";
import { countingPool } from "../helpers/counting-pool.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

/**
 * A pool that does not pipeline, whose query_timeout (the client's bound) fires on a statement that is not the
 * transaction's first, with more statements and COMMIT given behind it (batch-statements.ts givenTogether).
 */
describe("PostgreSQL inbox without pipelining: a statement past query_timeout stops the transaction", function () {
  this.timeout(60_000);
  const BOUND_MS = 1_000;
  let url: string;
  const pools: pg.Pool[] = [];

  before(async () => {
    url = await createTestDatabase("serial_timeout");
    await oneShot("CREATE TABLE t (x int)");
  });
  after(async () => {
    for (const p of pools) await p.end().catch(() => undefined);
  });

  async function oneShot(sql: string, params?: unknown[]): Promise<pg.QueryResult<{ n: number }>> {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      return await c.query<{ n: number }>(sql, params);
    } finally {
      await c.end();
    }
  }

  async function together(sqls: string[]): Promise<{ ok: boolean; at: number }[]> {
    const pool = new pg.Pool({ connectionString: url, max: 2, pipeline: false, query_timeout: BOUND_MS });
    pool.on("error", () => undefined);
    pools.push(pool);
    const tx = await new PostgresDriver({ pool }).begin();
    const t0 = Date.now();
    const sent = [...sqls.map((s) => tx.query(s)), tx.commit()];
    const settled = await Promise.all(
      sent.map((s) =>
        s.then(
          () => ({ ok: true, at: Date.now() - t0 }),
          () => ({ ok: false, at: Date.now() - t0 }),
        ),
      ),
    );
    await tx.rollback();
    return settled;
  }

  it("statements given together (a statements handler's) go one at a time: none is sent while another runs", async function () {
    // pg queues a statement given while another runs only with a deprecation warning (pg 8) and not at all in pg 9.
    const { pool, counted } = countingPool(url, 2, false);
    pools.push(pool);
    const store = createPostgresInboxStore({ pool, preCheck: false });
    await store.migrate();
    const insert = { sql: "INSERT INTO t VALUES (2)", params: [] };
    const outcome = await store.process(
      { messageId: "serial-1", consumer: "serial" },
      () => Promise.resolve(),
      {
        statements: [insert, insert, insert],
      },
    );
    assert.equal(outcome.kind, "committed");
    const since = { ...counted };
    // BEGIN, the marker, three statements, COMMIT: each its own round trip, nothing riding on another.
    assert.equal(since.roundTrips, since.statements, JSON.stringify(since));
    assert.equal((await oneShot("SELECT count(*)::int AS n FROM t WHERE x = 2")).rows[0]?.n, 3);
  });

  it("the server answers it late: nothing given behind it runs, nothing is committed", async function () {
    const settled = await together([
      "INSERT INTO t VALUES (1)",
      `SELECT pg_sleep(${(BOUND_MS * 1.5) / 1000})`,
      "INSERT INTO t VALUES (1)",
      "INSERT INTO t VALUES (1)",
    ]);
    assert.deepEqual(
      settled.map((s) => s.ok),
      [true, false, false, false, false],
    );
    // Wait on the server, not a clock: until the late statement has finished.
    for (;;) {
      const active = await oneShot(
        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%'",
      );
      if (active.rowCount === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal((await oneShot("SELECT count(*)::int AS n FROM t WHERE x = 1")).rows[0]?.n, 0);
  });

  it("it never answers: every statement behind it and COMMIT fail within one bound, not one bound each", async function () {
    const settled = await together(["SELECT 1", "SELECT pg_sleep(30)", "SELECT 2", "SELECT 3"]);
    const last = Math.max(...settled.map((s) => s.at));
    assert.ok(last < BOUND_MS * 1.8, `the last settled after ${last} ms (bound ${BOUND_MS} ms)`);
  });
});
