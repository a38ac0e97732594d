import type mssql from "mssql";
import type { StatementRequests } from "../batch-statements.ts";
import { composeTransaction, MARKER_EXISTS } from "./compose.ts";
import { sqlServerErrorNumbers } from "./error-chain.ts";
import { messageKey } from "../message-key.ts";

/**
 * SQL Server's requests for a transaction of statements: the markers and the statements in one T-SQL batch that
 * opens and commits the transaction itself, so BEGIN TRANSACTION costs no round trip of its own
 * (docs/batching.md, "BEGIN TRANSACTION with the first statement").
 */
export function sqlServerStatementRequests(insertMarkers: (rows: number) => string): StatementRequests {
  return {
    compose: (consumer, ids, messages) =>
      composeTransaction(
        { sql: insertMarkers(ids.length), params: [consumer, ...ids.map(messageKey)] },
        messages,
      ),
    markerExists: (error) =>
      sqlServerErrorNumbers(error).includes(MARKER_EXISTS.number) && stateOf(error) === MARKER_EXISTS.state,
  };
}

function stateOf(error: unknown): unknown {
  // mssql's RequestError carries the server's state; tedious's own error as its originalError does too.
  const e = error as { state?: unknown; originalError?: { state?: unknown } } | null;
  return e?.state ?? e?.originalError?.state;
}

interface TarnEvents {
  on(event: "release", listener: (resource: unknown) => void): void;
}

const guarded = new WeakSet<object>();

/**
 * A transaction opened by T-SQL text (BEGIN TRANSACTION in a pool request) that the request did not end, left
 * open on its connection: a batch that a compile-time error (a missing table, error 208) aborts without rolling
 * back, or a request cancelled by its timeout on a server that keeps the transaction. mssql's pool would hand
 * that connection to the next request, which would then run inside it. So every connection released with a
 * transaction still open (tedious's `inTransaction`, kept from the server's ENVCHANGE tokens) is closed in
 * tarn's 'release' event, before the pool validates and hands it out; mssql's validation then refuses it, and the
 * server rolls the transaction back when the connection closes. mssql's own transactions release their connection
 * only after COMMIT or ROLLBACK, with `inTransaction` false.
 */
export function closeConnectionsReleasedInTransaction(pool: mssql.ConnectionPool): void {
  const tarn = (pool as unknown as { pool?: TarnEvents | null }).pool ?? undefined;
  if (tarn === undefined || guarded.has(tarn)) return;
  guarded.add(tarn);
  tarn.on("release", (resource) => {
    const connection = resource as { inTransaction?: boolean; close?: () => void };
    if (connection.inTransaction !== true) return;
    try {
      connection.close?.();
    } catch {
      // already closed
    }
  });
}
