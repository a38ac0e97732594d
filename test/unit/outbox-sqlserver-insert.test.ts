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
  it("binds 9 parameters a row, numbers the rows in the caller's order, and takes 1 to 233 rows", function () {
    // 2,100 parameters a request, less the two sp_executesql takes: 233 rows of 9.
    assert.equal(SQLSERVER_INSERT_MAX_ROWS, 233);
    const most = insertRowsSql(SQLSERVER_INSERT_MAX_ROWS);
    assert.match(most, /@p2097\)/);
    assert.doesNotMatch(most, /@p2098\b/);
    assert.match(insertRowsSql(2), /\(1, @p1, [^)]*@p9\),\s*\(2, @p10, [^)]*@p18\)[\s\S]*ORDER BY v\.n;$/);
    assert.throws(() => insertRowsSql(0), RangeError);
    assert.throws(() => insertRowsSql(SQLSERVER_INSERT_MAX_ROWS + 1), RangeError);
  });

  it("leaves SessionId out (8 parameters a row) when no event of the call has a session key", async function () {
    const { tx, sent } = recording();
    await enqueue(tx, [
      { type: "NoteCreated", key: "a", body: {} },
      { type: "NoteCreated", key: "b", body: {} },
    ]);
    assert.equal(sent.length, 1);
    assert.doesNotMatch(sent[0]!.sql, /SessionId/);
    assert.equal(sent[0]!.params.length, 16);
    assert.match(sent[0]!.sql, /\(2, @p9, [^)]*@p16\)/);
  });

  it("enqueue sends 234 events as a statement of 233 rows, then one of 1, each value a parameter as given", async function () {
    const { tx, sent } = recording();
    const events = Array.from({ length: 234 }, (_, i) => ({
      type: "NoteCreated",
      key: `k${i}`,
      body: { text: `quote " and backslash \\ ${i}` },
      ...(i === 233 ? { sessionId: "account-7" } : {}),
    }));
    await enqueue(tx, events);
    assert.deepEqual(
      sent.map((s) => s.params.length),
      [2097, 9],
    );
    assert.equal(sent[0]!.sql, insertRowsSql(233));
    assert.equal(sent[1]!.sql, insertRowsSql(1));
    // [messageId, type, key, body, properties, correlationId, traceParent, traceState, sessionId]: the body as JSON.
    assert.deepEqual(sent[1]!.params.slice(1, 6), [
      "NoteCreated",
      "k233",
      JSON.stringify({ text: 'quote " and backslash \\ 233' }),
      null,
      null,
    ]);
    assert.equal(sent[1]!.params[8], "account-7");
    assert.equal(sent[0]!.params[8], null);
  });
});
