import type { ErrorClass } from "../domain/outcome.ts";
import type { Dialect, SqlResult } from "../domain/sql.ts";
import type { StatementRequests } from "./batch-statements.ts";
import type { MigrationResult, ModuleMigrations, PreCheckMode } from "./store.ts";

/**
 * The statements the store sends, one set per dialect (the dialects' statements.ts). Parameters are positional;
 * each comment gives them in order. A messageId is bound as its key (`messageKey`, src/inbox/message-key.ts).
 */
export interface InboxStatements {
  /** [consumer]: adds the consumer's name to InboxConsumer unless it is there; safe when two run at once. */
  readonly registerConsumer: string;
  /** [messageId, consumer]: the marker of a transactional handling, processed at once. */
  readonly insertProcessedMarker: string;
  /** [messageId, consumer]: an open two-phase claim; returns one row { id }. */
  readonly insertOpenClaim: string;
  /** [messageId, consumer]: a row when a processed marker exists. */
  readonly isProcessed: string;
  /** [messageId, consumer]: { id, processed (1 or 0) } or no row. */
  readonly readMarker: string;
  /** [messageId, consumer]: closes the open claim. */
  readonly markProcessed: string;
  /** [messageId, consumer, id]: closes the open claim only if it is still this claim row. */
  readonly markProcessedById: string;
  /**
   * [messageId, consumer, id]: takes an open claim over in one transaction, by deleting that claim row and
   * inserting a fresh one; returns the new row { id }, or no row when that claim row is no longer there.
   */
  readonly reenterClaim: string;
  /** [messageId, consumer, id]: deletes the open claim only if it is still this claim row. */
  readonly releaseClaim: string;
  /** [seconds, milliseconds]: deletes claims open longer than that, on the database's clock. */
  readonly sweepStaleClaims: string;
  /** Returns { n }. */
  readonly countOpenClaims: string;
  /**
   * [seconds, milliseconds]: returns { cutoff, cutoffSec }, the database's now minus that, as a time (for the
   * legacy table) and as the whole seconds of ReceivedSec before which a marker is older.
   */
  readonly cleanupCutoff: string;
  /**
   * [afterId, batchSize, cutoffSec]: takes the next batchSize rows by Id after afterId and deletes those received
   * before cutoffSec; returns { deleted, last (the range's last Id, null when empty), old (rows in it received
   * before cutoffSec), firstYoung (the first Id it kept, or null), high (the table's highest Id, null when empty:
   * the pace's insert rate, src/inbox/cleanup-pace.ts) }.
   */
  readonly cleanupBatch: string;
  readonly ping: string;
}

/**
 * The inbox table before migration 0002 (InboxLegacy), frozen by it: read for processed markers while it has any
 * rows, emptied by retention. Parameters as the batch statements'.
 */
export interface LegacyStatements {
  /** Returns { found }: truthy when the table exists. */
  readonly exists: string;
  /** Returns { found }: truthy when it holds a row. */
  readonly hasRows: string;
  /** Returns { id, done } for each of the messages with a marker there: done truthy if processed, else open. */
  processed(rows: number): string;
  /** [cutoff, batchSize]: deletes at most batchSize rows received before cutoff. */
  readonly cleanupBatch: string;
  /** [olderThan seconds, milliseconds]: deletes the open claims taken longer ago than that, as the sweeper does. */
  readonly sweepStaleClaims: string;
}

/**
 * The statements of a batch of messages, built for its size. Parameters: [consumer, messageKey...], except where
 * `arrays` is set: then [messageKeys as one array, consumer] (src/inbox/message-key.ts).
 */
export interface InboxBatchStatements {
  /** The most messages one batch statement may carry (SQL Server: 1,000 rows in a VALUES list). */
  readonly maxRows: number;
  /** True when the parameters are [ids[], consumer] (PostgreSQL's arrays); false for [consumer, id1..idn]. */
  readonly arrays: boolean;
  /** Returns { mkey } (the MessageKey) for each of the messages whose processed marker exists. */
  isProcessed(rows: number): string;
  /** Inserts processed markers for all of them. */
  insertMarkers(rows: number): string;
  /**
   * True when `insertMarkers` skips the rows whose key exists and returns { mkey } for those it inserted (so the
   * others are duplicates); false when a unique violation fails the whole statement.
   */
  readonly returnsInserted: boolean;
  /**
   * Inserts the markers failing whole when one exists, for a batch of statements sent with them (a skipped marker
   * would let a duplicate's statements be applied); absent when `insertMarkers` already fails so.
   */
  insertMarkersOrFail?(rows: number): string;
}

/** Which statement raised an error: only the marker insert's unique violation can mean "duplicate". */
export type StatementOrigin = "marker" | "other";

export interface InboxTransaction {
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
  commit(): Promise<void>;
  /** Never throws: a failed rollback means the connection is gone, and the database rolls back for us. */
  rollback(): Promise<void>;
}

/** What a database adapter provides; everything else about the inbox is the same on every database. */
export interface InboxDriver {
  readonly dialect: Dialect;
  readonly statements: InboxStatements;
  /** The statements of the table before migration 0002. */
  readonly legacy: LegacyStatements;
  /** Absent: the driver has no batch statements, and every batch goes message by message. */
  readonly batchStatements?: InboxBatchStatements;
  /**
   * How the driver sends a transaction of statements as requests of its own (SQL Server: one T-SQL batch). Absent:
   * the statements are given to a transaction together (PostgreSQL pipelines them; batch-statements.ts).
   */
  readonly statementRequests?: StatementRequests;
  /**
   * True when one transaction's connection takes a statement while others are in flight and runs them in the
   * order sent (pg in pipeline mode): a batch's handlers with disjoint keys then run at once. Absent or false
   * (mssql/tedious: one request at a time per connection): they run one after another.
   */
  readonly concurrentStatements?: boolean;
  /** One statement in its own (auto-commit) transaction. */
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
  begin(): Promise<InboxTransaction>;
  classify(error: unknown, origin: StatementOrigin): ErrorClass;
  /**
   * True when the error (or one it wraps) is the database choosing this transaction as a deadlock's victim, by
   * its structured number (PostgreSQL 40P01, SQL Server 1205). Only counts why batches fail (the metric).
   */
  isDeadlock?(error: unknown): boolean;
  migrate(module?: ModuleMigrations): Promise<MigrationResult>;
  pendingMigrations(module?: ModuleMigrations): Promise<string[]>;
  /**
   * Runs `work` on a connection of its own while that connection's session holds the lock `name` of this inbox
   * (its schema: one holder in the database at a time), asked for without waiting: `{ held: false }` at once when another session has it.
   * The lock is given back when `work` ends, and goes with the connection if that drops (the server releases a
   * session's locks when it ends), so a crashed instance never keeps it.
   */
  whileHolding<T>(name: string, work: (db: SessionQueries) => Promise<T>): Promise<Held<T>>;
  close(): Promise<void>;
}

/** Statements on the one connection that holds a session lock (`InboxDriver.whileHolding`). */
export interface SessionQueries {
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
}

/** What `whileHolding` did: ran the work under the lock, or found the lock held elsewhere and ran nothing. */
export type Held<T> = { readonly held: true; readonly value: T } | { readonly held: false };

export interface InboxStoreOptions {
  /** See `PreCheckMode` (default "redeliveries"). */
  readonly preCheck?: PreCheckMode;
  /** Rows per cleanup batch when the caller gives none (default 2,000, below SQL Server's lock escalation). */
  readonly cleanupBatchSize?: number;
}
