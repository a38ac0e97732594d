import assert from "node:assert/strict";
import mssql from "mssql";
import type { SqlResult } from "../../src/domain/sql.ts";
import { InboxCore, type InboxDriver, type InboxTransaction } from "../../src/inbox/core.ts";
import { classifySqlServerError } from "../../src/inbox/sqlserver/classify.ts";
import { legacy, statements } from "../../src/inbox/sqlserver/statements.ts";

/** A 2627 as mssql raises it for the marker insert or for any other statement that hits a unique index. */
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
 * The SQL Server store's own logic (InboxCore with the SQL Server statements and classifier) over a scripted
 * transaction: no SQL Server here, so this shows that the origin of the error, not its number, decides.
 */
function storeFailingAt(failing: "marker" | "business"): { store: InboxCore; log: string[] } {
  const log: string[] = [];
  const tx: InboxTransaction = {
    query<R>(sql: string): Promise<SqlResult<R>> {
      log.push(sql === statements.insertProcessedMarker ? "marker" : "business");
      const isMarker = sql === statements.insertProcessedMarker;
      if ((failing === "marker") === isMarker) return Promise.reject(uniqueViolation());
      return Promise.resolve({ rows: [], rowCount: 1 });
    },
    commit: () => Promise.resolve(void log.push("commit")),
    rollback: () => Promise.resolve(void log.push("rollback")),
  };
  const driver: InboxDriver = {
    dialect: "sqlserver",
    statements,
    legacy,
    // Registering the consumer, and asking for the legacy table (there is none): no rows.
    query: <R>() => Promise.resolve({ rows: [] as R[], rowCount: 0 }),
    begin: () => Promise.resolve(tx),
    classify: classifySqlServerError,
    migrate: () => Promise.reject(new Error("not used")),
    pendingMigrations: () => Promise.reject(new Error("not used")),
    whileHolding: () => Promise.reject(new Error("not used")),
    close: () => Promise.resolve(),
  };
  return { store: new InboxCore(driver, { preCheck: false }), log };
}

describe("SQL Server store: which statement raised 2627 decides duplicate", () => {
  const key = { messageId: "m-1", consumer: "c" };
  const work = async (tx: { query(sql: string): Promise<unknown> }) => {
    await tx.query("INSERT INTO dbo.Orders (OrderNo) VALUES (1)");
  };

  it("raised by the marker insert: duplicate, and the handler never ran", async () => {
    const { store, log } = storeFailingAt("marker");
    const outcome = await store.process(key, work);
    assert.equal(outcome.kind, "duplicate");
    assert.deepEqual(log, ["marker", "rollback"]);
  });

  it("raised by the business statement: failed (permanent), rolled back", async () => {
    const { store, log } = storeFailingAt("business");
    const outcome = await store.process(key, work);
    assert.equal(outcome.kind, "failed");
    assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
    assert.deepEqual(log, ["marker", "business", "rollback"]);
  });
});
