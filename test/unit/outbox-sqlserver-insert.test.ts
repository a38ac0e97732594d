import assert from "node:assert/strict";
import type { SqlExecutor, SqlResult } from "../../src/domain/sql.ts";
import { enqueue } from "../../src/outbox/enqueue.ts";
import { insertRowsSql, SQLSERVER_INSERT_MAX_ROWS } from "../../src/outbox/sqlserver/statements.ts";

/** A handler's tx on SQL Server that records what enqueue sends (no SQL Server here; the tier runs it on TDS). */
function recording(): { tx: SqlExecutor; sent: { sql: string; params: readonly unknown[] }[] } {
  const sent: { sql: string; params: readonly unknown[] }[] = [];
  const tx = {
    dialect: "sqlserver",
    query<R>(sql: string, params: readonly unknown[] = []): Promise<SqlResult<R>> {
      sent.push({ sql, params });
      return Promise.resolve({ rows: [], rowCount: 0 });
    },
  } as SqlExecutor;
  return { tx, sent };
}

describe("the SQL Server outbox insert", function () {
  it("binds 8 parameters a row, numbers the rows in the caller's order, and takes 1 to 262 rows", function () {
    // 2,100 parameters a request, less the two sp_executesql takes: 262 rows of 8.
    assert.equal(SQLSERVER_INSERT_MAX_ROWS, 262);
    const most = insertRowsSql(SQLSERVER_INSERT_MAX_ROWS);
    assert.match(most, /@p2096\)/);
    assert.doesNotMatch(most, /@p2097\b/);
    assert.match(insertRowsSql(2), /\(1, @p1, [^)]*@p8\),\s*\(2, @p9, [^)]*@p16\)[\s\S]*ORDER BY v\.n;$/);
    assert.throws(() => insertRowsSql(0), RangeError);
    assert.throws(() => insertRowsSql(SQLSERVER_INSERT_MAX_ROWS + 1), RangeError);
  });

  it("enqueue sends 263 events as a statement of 262 rows, then one of 1, each value a parameter as given", async function () {
    const { tx, sent } = recording();
    const events = Array.from({ length: 263 }, (_, i) => ({
      type: "NoteCreated",
      key: `k${i}`,
      body: { text: `quote " and backslash \\ ${i}` },
    }));
    await enqueue(tx, events);
    assert.deepEqual(
      sent.map((s) => s.params.length),
      [2096, 8],
    );
    assert.equal(sent[0]!.sql, insertRowsSql(262));
    assert.equal(sent[1]!.sql, insertRowsSql(1));
    // [messageId, type, key, body, properties, correlationId, traceParent, traceState]: the body as JSON text.
    assert.deepEqual(sent[1]!.params.slice(1, 6), [
      "NoteCreated",
      "k262",
      JSON.stringify({ text: 'quote " and backslash \\ 262' }),
      null,
      null,
    ]);
  });
});
