import assert from "node:assert/strict";
import mssql from "mssql";
import * as tedious from "tedious";
import * as tarn from "tarn";
import { discardAfterFailedRollback, rollbackOrDiscard } from "../../src/inbox/sqlserver/adapter.ts";

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

  it("a failed ROLLBACK request with another request waiting: the connection is closed before the pool hands it on", async () => {
    // mssql's ConnectionPool with a tarn pool built as mssql builds it (its own validate and destroy), of one
    // never-connected tedious Connection; a second acquire waits for it. No server: the ROLLBACK request's
    // failure is tedious's callback with an error (a timeout), the rest is mssql's and tarn's own code.
    // validateConnection off: no server to answer its SELECT 1; the check that matters here (a closed
    // connection is refused) runs before it either way.
    const pool = new mssql.ConnectionPool({
      server: "127.0.0.1",
      port: 1,
      user: "u",
      password: "p",
      validateConnection: false,
    });
    const internals = pool as unknown as {
      pool: tarn.Pool<tedious.Connection>;
      _poolValidate(c: tedious.Connection): boolean;
      _poolDestroy(c: tedious.Connection): Promise<void>;
    };
    const created: tedious.Connection[] = [];
    internals.pool = new tarn.Pool<tedious.Connection>({
      create: () => {
        const c = new tedious.Connection({
          server: "127.0.0.1",
          authentication: { type: "default", options: { userName: "u", password: "p" } },
          options: { port: 1 },
        });
        created.push(c);
        return Promise.resolve(c);
      },
      validate: internals._poolValidate.bind(pool),
      destroy: internals._poolDestroy.bind(pool),
      max: 1,
      min: 0,
    });
    const connection = await internals.pool.acquire().promise;
    const tx = new mssql.Transaction(pool);
    Object.assign(connection, { inTransaction: true }); // BEGIN TRAN was acknowledged
    Object.assign(connection, {
      rollbackTransaction: (callback: (error: Error) => void) =>
        setImmediate(() =>
          callback(new tedious.RequestError("Timeout: Request failed to complete", "ETIMEOUT")),
        ),
    });
    Object.assign(tx, { _acquiredConnection: connection, _aborted: false, _acquiredConfig: {} });
    const waiter = internals.pool.acquire().promise; // another message's transaction, waiting for a connection
    await rollbackOrDiscard(pool, tx, connection);
    const next = await waiter;
    assert.equal(connection.closed, true, "the connection with the open transaction is closed");
    assert.notEqual(next, connection, "and never handed to the waiting request");
    assert.equal(next.closed, false, "the waiting request's connection is left alone");
    internals.pool.release(next);
    await internals.pool.destroy();
    for (const c of created) c.close();
  });

  it("a transaction the server already rolled back (XACT_ABORT) leaves the connection alone", () => {
    const { pool, tx, connection } = heldTransaction();
    Object.assign(tx, { _acquiredConnection: null, _aborted: true });
    discardAfterFailedRollback(pool, tx, connection, new Error("EABORT"));
    assert.equal(connection.closed, false);
    connection.close();
  });
});
