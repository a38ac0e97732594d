import type { ErrorClass, ProcessOutcome } from "../domain/outcome.ts";
import type { Dialect, SqlExecutor, SqlResult } from "../domain/sql.ts";
import { ClaimLostError, UnawaitedStatementError } from "./errors.ts";
import { processStatements, processStatementsBatch, type StatementRequests } from "./batch-statements.ts";
import { runBatchHandlers } from "./batch-handlers.ts";
import { TransactionHandle } from "./transaction-handle.ts";
import type {
  BatchFailureReason,
  CleanupOptions,
  InboxBatchItem,
  InboxBatchOutcome,
  InboxBatchResult,
  InboxClaimOutcome,
  InboxKey,
  InboxStore,
  ProcessHint,
  MigrationResult,
  ModuleMigrations,
  PreCheckMode,
} from "./store.ts";

export type {
  BatchFailureReason,
  InboxBatchItem,
  InboxBatchOutcome,
  InboxBatchResult,
  PreCheckMode,
} from "./store.ts";

/**
 * The statements the store sends, one set per dialect (the dialects' statements.ts). Parameters are positional;
 * each comment gives them in order.
 */
export interface InboxStatements {
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
  /** [seconds, milliseconds]: returns { cutoff }, the database's now minus that. */
  readonly cleanupCutoff: string;
  /** [cutoff, batchSize]: deletes at most batchSize rows received before cutoff. */
  readonly cleanupBatch: string;
  readonly ping: string;
}

/**
 * The statements of a batch of messages, built for its size. Parameters: [consumer, messageId...], except where
 * `arrays` is set: then [messageIds as one array, consumer].
 */
export interface InboxBatchStatements {
  /** The most messages one batch statement may carry (SQL Server: 1,000 rows in a VALUES list). */
  readonly maxRows: number;
  /** True when the parameters are [ids[], consumer] (PostgreSQL's arrays); false for [consumer, id1..idn]. */
  readonly arrays: boolean;
  /** Returns { id } for each of the messages whose processed marker exists. */
  isProcessed(rows: number): string;
  /** Inserts processed markers for all of them. */
  insertMarkers(rows: number): string;
  /**
   * True when `insertMarkers` skips the rows whose key exists and returns { id } for those it inserted (so the
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
  close(): Promise<void>;
}

export interface InboxStoreOptions {
  /** See `PreCheckMode` (default "redeliveries"). */
  readonly preCheck?: PreCheckMode;
  /** Rows per cleanup batch when the caller gives none (default 500, below SQL Server's lock escalation). */
  readonly cleanupBatchSize?: number;
}

type Failed = Extract<ProcessOutcome, { kind: "failed" }>;

/** Which class wins when a handler's error and its failed statement's error disagree: an outage above all. */
const SEVERITY: Record<ErrorClass, number> = { unavailable: 3, transient: 2, permanent: 1, duplicate: 0 };

/**
 * The default pre-check mode reads for first deliveries too once more than this share of recent first deliveries
 * were duplicates, and stops again below FIRST_DUPLICATE_SHARE_TO_STOP (a gap, so a share near the line does not
 * flip it message by message). Skipping the read saves a fresh first delivery one round trip; a first delivery
 * whose marker exists then costs a rolled-back transaction instead of one read. `npm run bench:inbox` prints the
 * share at which the two break even: 51 to 61% on the embedded PostgreSQL (docs/benchmark.md, "The pre-check").
 */
const FIRST_DUPLICATE_SHARE_TO_READ = 0.5;
const FIRST_DUPLICATE_SHARE_TO_STOP = 0.4;

/** The inbox on any database, given that database's driver. */
export class InboxCore implements InboxStore {
  readonly dialect: Dialect;
  private readonly driver: InboxDriver;
  private readonly sql: InboxStatements;
  private readonly preCheck: PreCheckMode;
  private readonly cleanupBatchSize: number;

  constructor(driver: InboxDriver, options: InboxStoreOptions = {}) {
    this.driver = driver;
    this.dialect = driver.dialect;
    this.sql = driver.statements;
    this.preCheck = options.preCheck ?? "redeliveries";
    this.cleanupBatchSize = options.cleanupBatchSize ?? 500;
  }

  migrate(module?: ModuleMigrations): Promise<MigrationResult> {
    return this.driver.migrate(module);
  }

  pendingMigrations(module?: ModuleMigrations): Promise<string[]> {
    return this.driver.pendingMigrations(module);
  }

  /**
   * Whether a message is read for before its transaction, by the pre-check mode and what is known of it. In the
   * default mode a first delivery is read for too while many first deliveries have been duplicates lately (an
   * upstream replaying its events past the duplicate window): then the read is the cheaper path for them as well.
   */
  private preChecks(firstDelivery: boolean | undefined): boolean {
    if (this.preCheck !== "redeliveries") return this.preCheck;
    return firstDelivery !== true || this.readingFirstDeliveries;
  }

  /** The running share of decided first deliveries that were duplicates (each the latest 1/64 of it). */
  private firstDuplicateShare = 0;
  private readingFirstDeliveries = false;

  private noteFirstDelivery(kind: ProcessOutcome["kind"]): void {
    if (kind !== "committed" && kind !== "duplicate") return;
    this.firstDuplicateShare += ((kind === "duplicate" ? 1 : 0) - this.firstDuplicateShare) / 64;
    this.readingFirstDeliveries = this.readingFirstDeliveries
      ? this.firstDuplicateShare > FIRST_DUPLICATE_SHARE_TO_STOP
      : this.firstDuplicateShare > FIRST_DUPLICATE_SHARE_TO_READ;
  }

  async process(
    key: InboxKey,
    work: (tx: SqlExecutor) => Promise<void>,
    hint?: ProcessHint,
  ): Promise<ProcessOutcome> {
    const outcome = await this.processOne(key, work, hint);
    if (hint?.firstDelivery === true) this.noteFirstDelivery(outcome.kind);
    return outcome;
  }

  private async processOne(
    key: InboxKey,
    work: (tx: SqlExecutor) => Promise<void>,
    hint: ProcessHint | undefined,
  ): Promise<ProcessOutcome> {
    if (this.preChecks(hint?.firstDelivery)) {
      try {
        if (await this.isProcessed(key)) return { kind: "duplicate" };
      } catch (error) {
        return this.failed(error, "other");
      }
    }
    // A statements handler's work as data: the marker and the statements go to the database together.
    if (hint?.statements !== undefined) return processStatements(this.driver, key, hint.statements);
    let tx: InboxTransaction;
    try {
      tx = await this.driver.begin();
    } catch (error) {
      return this.failed(error, "other");
    }
    // The marker goes first: its key lock makes a concurrent duplicate wait here, before any work is done.
    try {
      await tx.query(this.sql.insertProcessedMarker, [key.messageId, key.consumer]);
    } catch (error) {
      await tx.rollback();
      const errorClass = this.driver.classify(error, "marker");
      return errorClass === "duplicate" ? { kind: "duplicate" } : { kind: "failed", error, errorClass };
    }
    const handle = new TransactionHandle(this.dialect, tx);
    try {
      await work(handle.executor);
    } catch (error) {
      await handle.end();
      await tx.rollback();
      return this.handlerFailed(error, handle.statementFailure);
    }
    // Commit waits for statements the handler left running, and never commits when one of them failed or the
    // handler tried to step outside the transaction.
    const problem = await handle.end();
    if (problem !== undefined) {
      await tx.rollback();
      return this.failed(problem, "other");
    }
    try {
      await tx.commit();
      return { kind: "committed" };
    } catch (error) {
      await tx.rollback();
      return this.failed(error, "other");
    }
  }

  /**
   * Several messages of one consumer in one transaction: one read for markers that exist, one insert of the
   * others' markers, the handlers (side by side where their keys are disjoint: batch-handlers.ts), one commit. Any failure rolls the whole batch back; its undecided
   * messages come back as `single`. Keys must be distinct.
   */
  async processBatch(consumer: string, items: readonly InboxBatchItem[]): Promise<InboxBatchResult> {
    const result = this.statementsBatch(items)
      ? await processStatementsBatch(this.driver, consumer, items, (item) => this.batchPreChecks(item))
      : await this.batchOnce(consumer, items);
    // A message that comes back `single` is noted when it goes through `process`.
    result.outcomes.forEach((o, i) => {
      if (items[i]!.firstDelivery === true && o.kind !== "single") this.noteFirstDelivery(o.kind);
    });
    return result;
  }

  /**
   * A batch of statements handlers only goes in one request; a mixed one takes the code path, where each
   * statements item runs its statements through the handle (docs/batching.md).
   */
  private statementsBatch(items: readonly InboxBatchItem[]): boolean {
    const batch = this.driver.batchStatements;
    return (
      batch !== undefined &&
      items.length > 0 &&
      items.length <= batch.maxRows &&
      new Set(items.map((i) => i.messageId)).size === items.length &&
      items.every((i) => i.statements !== undefined)
    );
  }

  /** Whether a batch reads for an item's marker first: as batchOnce decides it. */
  private batchPreChecks(item: InboxBatchItem): boolean {
    if (this.driver.batchStatements?.returnsInserted) return this.preChecks(item.firstDelivery);
    return this.preCheck !== false;
  }

  private async batchOnce(consumer: string, items: readonly InboxBatchItem[]): Promise<InboxBatchResult> {
    const batch = this.driver.batchStatements;
    const outcomes: InboxBatchOutcome[] = items.map(() => ({ kind: "single" }));
    if (batch === undefined || items.length === 0) return { outcomes };
    if (items.length > batch.maxRows || new Set(items.map((i) => i.messageId)).size !== items.length)
      throw new RangeError(`a batch takes 1 to ${batch.maxRows} messages with distinct MessageIds`);
    const params = (ids: readonly string[]): unknown[] =>
      batch.arrays ? [ids, consumer] : [consumer, ...ids];
    let open = items.map((_, i) => i);
    // Only the messages the mode reads for; first deliveries meet an existing marker at the insert instead. Where
    // the insert cannot skip an existing key (SQL Server), one such key fails the whole batch, and every message
    // then takes a transaction of its own: there the read, one per batch, is always made.
    const checked = batch.returnsInserted
      ? items.filter((item) => this.preChecks(item.firstDelivery))
      : this.preCheck === false
        ? []
        : items;
    if (checked.length > 0) {
      try {
        const found = await this.driver.query<{ id: string }>(
          batch.isProcessed(checked.length),
          params(checked.map((i) => i.messageId)),
        );
        const done = new Set(found.rows.map((r) => r.id));
        open = open.filter((i) => !done.has(items[i]!.messageId));
        for (let i = 0; i < items.length; i += 1) if (done.has(items[i]!.messageId)) outcomes[i] = DUPLICATE;
      } catch (failure) {
        return { outcomes, failure, reason: this.batchFailure(failure, "other") };
      }
      // Nothing left to write: no transaction opened, so none committed (the metric says so).
      if (open.length === 0) return { outcomes, noTransaction: true };
    }
    let tx: InboxTransaction;
    try {
      tx = await this.driver.begin();
    } catch (failure) {
      return { outcomes, failure, reason: this.batchFailure(failure, "other") };
    }
    const undecided = (failure: unknown, reason: BatchFailureReason): InboxBatchResult => ({
      outcomes: outcomes.map((o) => (o.kind === "duplicate" ? o : SINGLE)),
      failure,
      reason: this.batchFailure(failure, reason),
    });
    try {
      // The keys in one order (code-unit order; any fixed order does), so two batches sharing keys take their key
      // locks in that order and cannot deadlock on them: SQL Server's VALUES rows go in as given, PostgreSQL's
      // statement sorts them again itself (ORDER BY m). The handlers still run in arrival order.
      const inserted = await tx.query<{ id: string }>(
        batch.insertMarkers(open.length),
        params(open.map((i) => items[i]!.messageId).sort()),
      );
      if (batch.returnsInserted) {
        // Decided from the keys the database returns, never from an error's text.
        const fresh = new Set(inserted.rows.map((r) => r.id));
        for (const i of open) if (!fresh.has(items[i]!.messageId)) outcomes[i] = DUPLICATE;
        open = open.filter((i) => fresh.has(items[i]!.messageId));
      }
    } catch (failure) {
      await tx.rollback();
      return undecided(
        failure,
        this.driver.classify(failure, "marker") === "duplicate" ? "duplicate" : "other",
      );
    }
    const failed = await runBatchHandlers(
      tx,
      this.dialect,
      items,
      open,
      this.driver.concurrentStatements === true,
      (error) => this.driver.isDeadlock?.(error) === true,
    );
    if (failed !== undefined) {
      await tx.rollback();
      return undecided(failed.failure, failed.deadlock ? "deadlock" : "handler_error");
    }
    try {
      await tx.commit();
    } catch (failure) {
      // Committed or not, the single path decides each one: a marker that made it makes that one a duplicate.
      await tx.rollback();
      return undecided(failure, "other");
    }
    for (const i of open) outcomes[i] = COMMITTED;
    return { outcomes };
  }

  /** A deadlock wherever it happened, else the reason the failing step gives. */
  private batchFailure(failure: unknown, otherwise: BatchFailureReason): BatchFailureReason {
    return this.driver.isDeadlock?.(failure) ? "deadlock" : otherwise;
  }

  async isProcessed(key: InboxKey): Promise<boolean> {
    const result = await this.driver.query(this.sql.isProcessed, [key.messageId, key.consumer]);
    return result.rows.length > 0;
  }

  async claim(key: InboxKey, reenter?: string): Promise<InboxClaimOutcome> {
    try {
      // One statement, so its own transaction: the claim is committed when it returns.
      const result = await this.driver.query<{ id: string | number | null }>(this.sql.insertOpenClaim, [
        key.messageId,
        key.consumer,
      ]);
      const id = result.rows[0]?.id;
      if (id === undefined || id === null) throw new Error("inbox claim insert returned no Id");
      return { kind: "claimed", claimId: String(id) };
    } catch (error) {
      const errorClass = this.driver.classify(error, "marker");
      if (errorClass !== "duplicate") return { kind: "failed", error, errorClass };
    }
    try {
      const marker = await this.readMarker(key);
      // No row: the holder's claim was just swept; the next delivery claims it afresh.
      if (marker?.processed) return { kind: "duplicate" };
      if (marker && reenter !== undefined && marker.id === reenter) {
        // The claim an earlier attempt took, still open: a retry takes it over rather than finding it busy. The
        // takeover gives the claim a new id, atomically, so it succeeds once per id: a second delivery carrying
        // the same id (a scheduled copy redelivered after its lock was lost while the first delivery still
        // performs) finds the id gone and the claim busy, instead of performing alongside it.
        const taken = await this.driver.query<{ id: string | number | null }>(this.sql.reenterClaim, [
          key.messageId,
          key.consumer,
          reenter,
        ]);
        const id = taken.rows[0]?.id;
        if (id !== undefined && id !== null) return { kind: "claimed", claimId: String(id), reentered: true };
      }
      return { kind: "busy" };
    } catch (error) {
      return this.failed(error, "other");
    }
  }

  async markProcessed(key: InboxKey, claimId?: string): Promise<void> {
    const result =
      claimId === undefined
        ? await this.driver.query(this.sql.markProcessed, [key.messageId, key.consumer])
        : await this.driver.query(this.sql.markProcessedById, [key.messageId, key.consumer, claimId]);
    if (result.rowCount === 1) return;
    // Nothing open to close: fine if this very claim is already processed (a repeated call), lost otherwise.
    const marker = await this.readMarker(key);
    if (marker?.processed && (claimId === undefined || marker.id === claimId)) return;
    throw new ClaimLostError(key, claimId);
  }

  async releaseClaim(key: InboxKey, claimId: string): Promise<boolean> {
    const result = await this.driver.query(this.sql.releaseClaim, [key.messageId, key.consumer, claimId]);
    return result.rowCount === 1;
  }

  async sweepStaleClaims(olderThanMs: number): Promise<number> {
    const result = await this.driver.query(this.sql.sweepStaleClaims, splitMs(olderThanMs, "olderThanMs"));
    return result.rowCount;
  }

  async countOpenClaims(): Promise<number> {
    const result = await this.driver.query<{ n: number | string }>(this.sql.countOpenClaims);
    return Number(result.rows[0]?.n ?? 0);
  }

  async cleanup(
    retentionMs: number,
    batchSize = this.cleanupBatchSize,
    options: CleanupOptions = {},
  ): Promise<number> {
    if (!Number.isInteger(batchSize) || batchSize < 1)
      throw new RangeError(`batchSize must be a positive integer`);
    // One cutoff for the whole run, so rows inserted meanwhile never qualify and the loop ends.
    const cut = await this.driver.query<{ cutoff: Date }>(
      this.sql.cleanupCutoff,
      splitMs(retentionMs, "retentionMs"),
    );
    const cutoff = cut.rows[0]?.cutoff;
    if (!(cutoff instanceof Date)) throw new Error("inbox cleanup: the database returned no cutoff");
    let total = 0;
    for (;;) {
      // Each batch is its own short transaction: locks are held for one small batch only.
      const { rowCount } = await this.driver.query(this.sql.cleanupBatch, [cutoff, batchSize]);
      total += rowCount;
      options.onBatch?.(rowCount);
      if (rowCount < batchSize) return total;
    }
  }

  classify(error: unknown): ErrorClass {
    return this.driver.classify(error, "other");
  }

  async ping(): Promise<void> {
    await this.driver.query(this.sql.ping);
  }

  close(): Promise<void> {
    return this.driver.close();
  }

  private async readMarker(key: InboxKey): Promise<{ id: string; processed: boolean } | undefined> {
    const result = await this.driver.query<{ id: string | number; processed: unknown }>(this.sql.readMarker, [
      key.messageId,
      key.consumer,
    ]);
    const row = result.rows[0];
    if (!row) return undefined;
    return { id: String(row.id), processed: Number(row.processed) === 1 };
  }

  /**
   * A handler that threw after one of its own statements failed may have caught that error and thrown its own
   * (a message, a wrapper without `cause`): the statement's error is the database's word on what happened, so
   * an outage or a transient failure it shows is not hidden behind the handler's error.
   */
  private handlerFailed(error: unknown, statementFailure: unknown): Failed {
    const thrown = this.failed(error, "other");
    if (statementFailure === undefined) return thrown;
    const statement = this.failed(statementFailure, "other").errorClass;
    return SEVERITY[statement] > SEVERITY[thrown.errorClass] ? { ...thrown, errorClass: statement } : thrown;
  }

  private failed(error: unknown, origin: StatementOrigin): Failed {
    // An unawaited statement's failure is classed by that statement's own error (an outage stays an outage).
    const cause = error instanceof UnawaitedStatementError ? error.cause : error;
    const errorClass = this.driver.classify(cause, origin);
    // Only the marker insert may yield duplicate; from anywhere else the same signal is a plain failure.
    return { kind: "failed", error, errorClass: errorClass === "duplicate" ? "permanent" : errorClass };
  }
}

const SINGLE: InboxBatchOutcome = { kind: "single" };
const DUPLICATE: InboxBatchOutcome = { kind: "duplicate" };
const COMMITTED: InboxBatchOutcome = { kind: "committed" };

/** A duration as [whole seconds, remaining milliseconds]: SQL Server's DATEADD takes an int, too small for ms. */
function splitMs(ms: number, name: string): [number, number] {
  if (!Number.isFinite(ms) || ms < 0)
    throw new RangeError(`${name} must be a non-negative number of milliseconds`);
  const whole = Math.floor(ms);
  return [Math.floor(whole / 1000), whole % 1000];
}
