import type pg from "pg";
import { clientGraceMs, DEFAULT_DATABASE_TIMEOUTS, type DatabaseTimeouts } from "../timeouts.ts";

/**
 * A pg pool whose every wait is bounded: connecting (and waiting for a free connection), each statement on the
 * server (statement_timeout, a transient 57014), each statement on the client (query_timeout, which also ends
 * a wait on a server that has gone silent), a transaction left idle, and a dead peer on an idle connection
 * (TCP keep-alive).
 */
export function postgresPoolConfig(
  url: string,
  maxConnections: number,
  timeouts: DatabaseTimeouts = DEFAULT_DATABASE_TIMEOUTS,
): pg.PoolConfig {
  return {
    connectionString: url,
    max: maxConnections,
    connectionTimeoutMillis: timeouts.connectMs,
    statement_timeout: timeouts.statementMs,
    query_timeout: timeouts.statementMs + clientGraceMs(timeouts.statementMs),
    // A handler that stalls between statements must not hold the marker's lock (and a connection) for ever; its
    // own bound, longer than a statement's, so a slow downstream call between two statements is not cut short.
    idle_in_transaction_session_timeout:
      timeouts.idleInTransactionMs ?? DEFAULT_DATABASE_TIMEOUTS.idleInTransactionMs,
    keepAlive: true,
    // Statements given together go out together: a transaction's BEGIN rides with its first statement (adapter.ts).
    pipeline: true,
    keepAliveInitialDelayMillis: timeouts.keepAliveMs,
  };
}
