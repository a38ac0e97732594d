/**
 * Bounds on every wait for the database, so that a database that stops answering (packets dropped, no reset)
 * ends in an error that pauses the worker, never in a hang. The settings SBINBOX_DB_*_TIMEOUT_MS and
 * SBINBOX_DB_KEEPALIVE_MS fill them in; docs/inbox.md says what each bounds on each database.
 */
export interface DatabaseTimeouts {
  /** A new connection, or a free one from a full pool. */
  readonly connectMs: number;
  /** One statement: the server cancels it at this bound, the client gives up on the connection shortly after. */
  readonly statementMs: number;
  /**
   * How long a transaction may sit idle between a handler's statements (PostgreSQL's
   * idle_in_transaction_session_timeout; default 2 min). Longer than a statement's bound: a handler may make a
   * slow HTTP call between two statements, while a stalled one must not hold the marker's lock for ever.
   */
  readonly idleInTransactionMs?: number;
  /** Idle time before TCP keep-alive probes start (PostgreSQL; tedious fixes its own at 30 s). */
  readonly keepAliveMs: number;
}

export const DEFAULT_DATABASE_TIMEOUTS: DatabaseTimeouts = {
  connectMs: 15_000,
  statementMs: 30_000,
  idleInTransactionMs: 120_000,
  keepAliveMs: 10_000,
};

/**
 * How long past the server's statement timeout the client waits before it decides the connection is dead:
 * long enough for the server's own cancellation (a clean, transient error) to arrive first.
 */
export function clientGraceMs(statementMs: number): number {
  return Math.max(1_000, Math.round(statementMs / 10));
}
