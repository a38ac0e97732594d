import assert from "node:assert/strict";
import mssql from "mssql";
import type { SqlResult } from "../../src/domain/sql.ts";
import { InboxCore, type InboxDriver, type InboxTransaction } from "../../src/inbox/core.ts";
import { classifySqlServerError } from "../../src/inbox/sqlserver/classify.ts";
import { batchStatements, legacy, statements } from "../../src/inbox/sqlserver/statements.ts";
import { messageKey } from "../../src/inbox/message-key.ts";

/** A 2627 as mssql raises it: what the multi-row marker insert meets when one of its keys exists. */
function uniqueViolation(): mssql.RequestError {
  const info = {
    number: 2627,
    state: 1,
    class: 14,
    message: "Violation of UNIQUE KEY constraint",
    serverName: "s",
    procName: "",
    lineNumber: 1,
  };
  return new mssql.RequestError(Object.assign(new Error(info.message), { info }), "EREQUEST");
}

/**
 * InboxCore with the SQL Server statements over a scripted transaction (no SQL Server here; the conformance suite
 * runs the same on a real one with SBINBOX_TEST_MSSQL): what the batch sends, with which parameters, and what it
 * makes of a 2627 on its marker insert.
 */
function store(insertFails: boolean, found: string[] = []) {
  const log: { sql: string; params: readonly unknown[] }[] = [];
  const tx: InboxTransaction = {
    query<R>(sql: string, params: readonly unknown[] = []): Promise<SqlResult<R>> {
      log.push({ sql, params });
      if (insertFails && sql.startsWith("INSERT INTO [dbo].Inbox")) return Promise.reject(uniqueViolation());
      return Promise.resolve({ rows: [], rowCount: 1 });
    },
    commit: () => Promise.resolve(void log.push({ sql: "COMMIT", params: [] })),
    rollback: () => Promise.resolve(void log.push({ sql: "ROLLBACK", params: [] })),
  };
  const driver: InboxDriver = {
    dialect: "sqlserver",
    statements,
    batchStatements,
    legacy,
    query: <R>(sql: string, params: readonly unknown[] = []) => {
      // Registering the consumer, and asking for the legacy table (there is none), are not the batch's own.
      if (sql === statements.registerConsumer || sql === legacy.exists)
        return Promise.resolve({ rows: [] as R[], rowCount: 0 });
      log.push({ sql, params });
      return Promise.resolve({
        rows: found.map((id) => ({ mkey: messageKey(id) })) as R[],
        rowCount: found.length,
      });
    },
    begin: () => Promise.resolve(tx),
    classify: classifySqlServerError,
    migrate: () => Promise.reject(new Error("not used")),
    pendingMigrations: () => Promise.reject(new Error("not used")),
    whileHolding: () => Promise.reject(new Error("not used")),
    close: () => Promise.resolve(),
  };
  return { store: new InboxCore(driver, { preCheck: true }), log };
}

describe("SQL Server batch: statements, parameters, and a 2627 on the multi-row marker insert", function () {
  const items = (ids: string[], ran: string[]) =>
    ids.map((id) => ({
      messageId: id,
      work: () => {
        ran.push(id);
        return Promise.resolve();
      },
    }));

  it("sends [consumer, keys...] to the pre-check and the insert; commits once", async function () {
    const ran: string[] = [];
    const { store: s, log } = store(false, ["b"]);
    const result = await s.processBatch("billing", items(["a", "b", "c"], ran));
    assert.deepEqual(
      result.outcomes.map((o) => o.kind),
      ["committed", "duplicate", "committed"],
    );
    assert.deepEqual(ran, ["a", "c"]);
    assert.equal(log[0]!.sql, batchStatements.isProcessed(3));
    assert.deepEqual(log[0]!.params, ["billing", ...["a", "b", "c"].map(messageKey)]);
    assert.equal(log[1]!.sql, batchStatements.insertMarkers(2));
    assert.deepEqual(log[1]!.params, ["billing", ...["a", "c"].map(messageKey)]);
    assert.equal(log.filter((l) => l.sql === "COMMIT").length, 1);
  });

  it("sends the marker rows sorted by MessageId (batches sharing keys lock them in one order); handlers run as they came", async function () {
    const ran: string[] = [];
    const { store: s, log } = store(false);
    const result = await s.processBatch("billing", items(["m-3", "m-1", "m-2"], ran));
    assert.equal(result.failure, undefined);
    const insert = log.find((l) => l.sql === batchStatements.insertMarkers(3));
    assert.deepEqual(insert?.params, ["billing", ...["m-1", "m-2", "m-3"].map(messageKey)]);
    assert.deepEqual(ran, ["m-3", "m-1", "m-2"]);
  });

  it("a 2627 on the insert: rolled back, no handler ran, every undecided message goes alone", async function () {
    const ran: string[] = [];
    const { store: s, log } = store(true, ["b"]);
    const result = await s.processBatch("billing", items(["a", "b", "c"], ran));
    assert.deepEqual(
      result.outcomes.map((o) => o.kind),
      ["single", "duplicate", "single"],
    );
    assert.deepEqual(ran, []);
    assert.ok(result.failure instanceof mssql.RequestError);
    assert.equal(result.reason, "duplicate", "counted as a duplicate key, from its number");
    assert.deepEqual(log.map((l) => l.sql).slice(-1), ["ROLLBACK"]);
  });

  it("the largest batch stays within SQL Server's limits: 1,000 rows, 1,001 parameters", function () {
    const insert = batchStatements.insertMarkers(1000);
    assert.equal(insert.match(/\(@p\d+\)/g)?.length, 1000);
    assert.equal(new Set(insert.match(/@p\d+/g)).size, 1001);
    assert.ok(new Set(batchStatements.isProcessed(1000).match(/@p\d+/g)).size <= 2100);
    assert.throws(() => batchStatements.insertMarkers(1001), /1 to 1000 rows/);
  });
});
