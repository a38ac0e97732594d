import type mssql from "mssql";

/** mssql's private handle on the transaction's connection (a tedious Connection); typed here, read in one place. */
export interface HeldConnection {
  _acquiredConnection?: { close(): void; removeAllListeners?(event: string): void } | null;
  _aborted?: boolean;
}

/** mssql's tarn pool, whose 'release' listeners run before a released connection is validated and handed out. */
interface TarnEvents {
  on(event: "release", listener: (resource: unknown) => void): void;
  removeListener(event: "release", listener: (resource: unknown) => void): void;
}

/** The connections whose rollback is under way, per tarn pool, and the one listener that watches them. */
const rollingBack = new WeakMap<TarnEvents, Set<unknown>>();

/**
 * Rolls back; a rollback that fails leaves the transaction open on its connection, holding the marker's key
 * lock, and the connection is closed (the server then rolls back and releases the locks).
 *
 * On a failed ROLLBACK request mssql hands the connection back to the pool before the error reaches us; with
 * another request waiting, tarn would give it to that request, and closing it afterwards would close a
 * connection that is no longer ours. So the close happens in tarn's 'release' event, which runs before tarn
 * validates and hands the connection out: a connection released with its transaction still open (tedious's
 * `inTransaction`, cleared by the server's rollback) is closed there, and mssql's validation then refuses it.
 */
export async function rollbackOrDiscard(
  pool: mssql.ConnectionPool,
  tx: mssql.Transaction,
  connection: HeldConnection["_acquiredConnection"],
): Promise<void> {
  const tarn = (pool as unknown as { pool?: TarnEvents | null }).pool ?? undefined;
  const watched = tarn && connection ? watchReleases(tarn) : undefined;
  watched?.add(connection);
  try {
    await tx.rollback();
  } catch (error) {
    discardAfterFailedRollback(pool, tx, connection, error);
  } finally {
    watched?.delete(connection);
  }
}

function watchReleases(tarn: TarnEvents): Set<unknown> {
  let watched = rollingBack.get(tarn);
  if (watched === undefined) {
    const set = new Set<unknown>();
    tarn.on("release", (resource) => {
      if (set.has(resource) && (resource as { inTransaction?: boolean }).inTransaction === true)
        closeQuietly(resource as { close(): void });
    });
    rollingBack.set(tarn, set);
    watched = set;
  }
  return watched;
}

function closeQuietly(connection: { close(): void }): void {
  try {
    connection.close();
  } catch {
    // already closed
  }
}

/**
 * After a failed rollback: on EREQINPROG (a request still running) mssql keeps the connection checked out for
 * ever, so it is closed and let go here. A connection mssql already handed back is not touched here (it may now
 * be another request's): rollbackOrDiscard's release hook closed it if its transaction was still open. A
 * transaction the server already rolled back (XACT_ABORT, mssql's EABORT) needs nothing.
 */
export function discardAfterFailedRollback(
  pool: mssql.ConnectionPool,
  tx: mssql.Transaction,
  connection: HeldConnection["_acquiredConnection"],
  _error: unknown,
): void {
  const held = tx as unknown as HeldConnection;
  if (held._aborted || !connection || held._acquiredConnection !== connection) return;
  closeQuietly(connection);
  held._acquiredConnection = null;
  (pool as unknown as { release(connection: unknown): void }).release(connection);
}
