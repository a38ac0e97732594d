import assert from "node:assert/strict";
import mssql from "mssql";
import * as tedious from "tedious";
import { discardAfterFailedRollback } from "../../src/inbox/sqlserver/adapter.ts";

/**
 * No SQL Server here: the transaction is a real mssql Transaction holding a real (never connected) tedious
 * Connection, in the state mssql leaves it in; the rollback's refusal is mssql's own code path.
 */
function heldTransaction(): {
  pool: mssql.ConnectionPool;
  tx: mssql.Transaction;
  connection: tedious.Connection;
} {
  const pool = new mssql.ConnectionPool({ server: "127.0.0.1", port: 1, user: "u", password: "p" });
  const tx = new mssql.Transaction(pool);
  const connection = new tedious.Connection({
    server: "127.0.0.1",
    authentication: { type: "default", options: { userName: "u", password: "p" } },
    options: { port: 1 },
  });
  Object.assign(tx, { _acquiredConnection: connection });
  return { pool, tx, connection };
}

const fields = (tx: mssql.Transaction) =>
  tx as unknown as { _acquiredConnection: unknown; _aborted?: boolean };

describe("SQL Server: a rollback that fails closes its connection", () => {
  it("mssql refuses the rollback while a request runs (EREQINPROG): the connection is closed and let go", async () => {
    const { pool, tx, connection } = heldTransaction();
    Object.assign(tx, { _activeRequest: new mssql.Request(tx) }); // a second statement still running
    const error = (await tx.rollback().then(
      () => undefined,
      (e: unknown) => e,
    )) as { code?: string } | undefined;
    assert.equal(error?.code, "EREQINPROG", "mssql's own refusal");
    assert.equal(fields(tx)._acquiredConnection, connection, "mssql still holds it: it would never return");
    discardAfterFailedRollback(pool, tx, fields(tx)._acquiredConnection as never, error);
    assert.equal(connection.closed, true, "closed, so the server rolls back and frees the marker's lock");
    assert.equal(fields(tx)._acquiredConnection, null);
  });

  it("a failed ROLLBACK request, connection already handed back by mssql: it is closed for the pool to drop", () => {
    const { pool, tx, connection } = heldTransaction();
    Object.assign(tx, { _acquiredConnection: null });
    discardAfterFailedRollback(pool, tx, connection, new Error("timeout"));
    assert.equal(connection.closed, true);
  });

  it("a transaction the server already rolled back (XACT_ABORT) leaves the connection alone", () => {
    const { pool, tx, connection } = heldTransaction();
    Object.assign(tx, { _acquiredConnection: null, _aborted: true });
    discardAfterFailedRollback(pool, tx, connection, new Error("EABORT"));
    assert.equal(connection.closed, false);
    connection.close();
  });
});
