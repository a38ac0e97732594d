/**
 * The statements the outbox sends, one set per dialect (postgres/statements.ts, sqlserver/statements.ts).
 * Parameters are positional; each comment gives them in order.
 */
export interface OutboxStatements {
  /**
   * [messageIds, types, keys, bodies, properties, correlationIds, traceParents, traceStates, sessionIds] on
   * PostgreSQL (one array each); on SQL Server the statement for one row, [its 9 values] (insertRowsSql(n) takes n rows). Inserts
   * the rows in the order given (PostgreSQL returns { id }; nothing reads it).
   */
  readonly insertRows: string;
  /** Wakes listening relays when the caller's transaction commits (PostgreSQL); empty where there is none. */
  readonly notify: string;
  /**
   * [batchSize, leaseMs, windowMs]: claims up to batchSize unsent rows in Id order that no other relay holds and
   * whose first attempt is inside the duplicate-detection window, a row with a session id only as the head of its
   * key (no earlier row of the key unsent); returns them (OutboxRowRecord). Sets
   * FirstAttemptUtc on a first try before the send, so that a relay killed mid-send leaves it set.
   */
  readonly claim: string;
  /** [ids]: the rows were accepted by the broker. */
  readonly markSent: string;
  /**
   * [ids, delayMs, neverSentIds]: a transient failure; the rows are claimable again after delayMs. The rows in
   * neverSentIds (a subset, each claimed for its first try) clear FirstAttemptUtc again: the failure proves no
   * copy reached the broker, so the duplicate-detection window has not started for them.
   */
  readonly release: string;
  /** [id, error]: the broker refuses this row for good. */
  readonly setAside: string;
  /** [windowMs]: { lagMs, unsent, stale, setAside }. */
  readonly status: string;
  /** [retentionSeconds, batchSize]: deletes at most batchSize rows sent longer ago than that. */
  readonly cleanupBatch: string;
}

/** A claimed row as the claim statement returns it. */
export interface OutboxRowRecord {
  readonly id: string | number;
  readonly messageId: string;
  readonly type: string;
  readonly key: string;
  readonly body: string;
  readonly properties: string | null;
  readonly correlationId: string | null;
  readonly traceParent: string | null;
  readonly traceState: string | null;
  readonly attempts: number;
  /** The session key, or null. */
  readonly sessionId?: string | null;
  /** FirstAttemptUtc was unset before this claim (true or 1): PostgreSQL's claim says so directly. */
  readonly firstTry?: boolean | number;
  /** Or the row's FirstAttemptUtc before this claim, null on a first try: SQL Server's claim (OUTPUT DELETED). */
  readonly firstAttemptBefore?: Date | string | null;
}

/** The PostgreSQL channel a committed enqueue notifies and relays listen on. */
export const OUTBOX_CHANNEL = "sbinbox_outbox";
