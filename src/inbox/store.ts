import type { ClaimOutcome, ErrorClass, ProcessOutcome } from "../domain/outcome.ts";
import type { Dialect, SqlExecutor } from "../domain/sql.ts";

/** The inbox's identity for one handling of one message. */
export interface InboxKey {
  readonly messageId: string;
  readonly consumer: string;
}

export interface MigrationResult {
  readonly applied: readonly string[];
}

/**
 * The port every database adapter implements; the conformance suite runs against each one.
 * An adapter owns its connection pool.
 */
export interface InboxStore {
  readonly dialect: Dialect;

  /** Applies pending migrations; a no-op when none are pending; safe when two instances run it at once. */
  migrate(): Promise<MigrationResult>;

  /**
   * One transaction: insert the marker first (its key lock makes a concurrent duplicate wait here),
   * run `work` on the same transaction, commit. The marker's unique violation yields `duplicate`;
   * any other error rolls back and yields `failed`.
   */
  process(key: InboxKey, work: (tx: SqlExecutor) => Promise<void>): Promise<ProcessOutcome>;

  /** The fast-path read: a marker for this key exists and is processed. Correctness never depends on it. */
  isProcessed(key: InboxKey): Promise<boolean>;

  /** Two-phase, phase 1: insert the marker with ProcessedUtc null and commit. */
  claim(key: InboxKey): Promise<ClaimOutcome>;
  /** Two-phase, phase 3: record that the external effect happened. */
  markProcessed(key: InboxKey): Promise<void>;
  /** Makes claims open longer than `olderThanMs` retryable; returns how many. */
  sweepStaleClaims(olderThanMs: number): Promise<number>;
  /** Number of claims still open (for metrics). */
  countOpenClaims(): Promise<number>;

  /** Deletes rows older than `retentionMs` in batches of `batchSize`; returns the number deleted. */
  cleanup(retentionMs: number, batchSize?: number): Promise<number>;

  /** Classifies an error raised by this adapter's driver. */
  classify(error: unknown): ErrorClass;

  /** A cheap round trip, used as the readiness probe and to end an outage pause. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
