import type { ErrorClass, ProcessOutcome } from "../domain/outcome.ts";
import type { Dialect, SqlExecutor } from "../domain/sql.ts";
import { ClaimLostError, UnawaitedStatementError } from "./errors.ts";
import { processStatements, processStatementsBatch } from "./batch-statements.ts";
import { processMarkersBatch } from "./batch-markers.ts";
import { TransactionHandle } from "./transaction-handle.ts";
import { messageKey } from "./message-key.ts";
import { ConsumerRegistry, LegacyInbox } from "./legacy.ts";
import { cleanupRanges } from "./cleanup.ts";
import { ArrivalMeter, checkPace } from "./cleanup-pace.ts";
import type {
  InboxDriver,
  InboxStatements,
  SessionQueries,
  InboxStoreOptions,
  InboxTransaction,
  StatementOrigin,
} from "./driver.ts";
import type {
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

// What a database adapter provides is declared in driver.ts; its importers find it here too.
export type {
  InboxBatchStatements,
  InboxDriver,
  InboxStatements,
  LegacyStatements,
  InboxStoreOptions,
  InboxTransaction,
  StatementOrigin,
} from "./driver.ts";

export type {
  BatchFailureReason,
  InboxBatchItem,
  InboxBatchOutcome,
  InboxBatchResult,
  PreCheckMode,
} from "./store.ts";

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
/** Below this share (one duplicate among the last 256 or so) a batch's handlers start beside its marker insert. */
const FIRST_DUPLICATE_SHARE_TO_START_EARLY = 1 / 256;

/** The inbox on any database, given that database's driver. */
export class InboxCore implements InboxStore {
  readonly dialect: Dialect;
  readonly handlersSideBySide: boolean;
  private readonly driver: InboxDriver;
  private readonly sql: InboxStatements;
  private readonly preCheck: PreCheckMode;
  private readonly cleanupBatchSize: number;
  private readonly consumers: ConsumerRegistry;
  private readonly legacy: LegacyInbox;
  /** Where the last cleanup run found the first young marker: the next run starts its ranges there. */
  private cleanupAfterId = "0";
  /** The inbox's insert rate, from the key's advance seen by the cleanup runs: their pace (cleanup-pace.ts). */
  private readonly cleanupMeter = new ArrivalMeter();

  constructor(driver: InboxDriver, options: InboxStoreOptions = {}) {
    this.driver = driver;
    this.consumers = new ConsumerRegistry(driver);
    this.legacy = new LegacyInbox(driver);
    this.dialect = driver.dialect;
    this.handlersSideBySide = driver.concurrentStatements === true;
    this.sql = driver.statements;
    this.preCheck = options.preCheck ?? "redeliveries";
    this.cleanupBatchSize = options.cleanupBatchSize ?? DEFAULT_CLEANUP_BATCH;
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
    try {
      await this.consumers.register(key.consumer);
      if (await this.legacy.processed(key.consumer, [key.messageId]).then((found) => found.size > 0))
        return { kind: "duplicate" };
    } catch (error) {
      return this.failed(error, "other");
    }
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
      await tx.query(this.sql.insertProcessedMarker, keyParams(key));
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
    let old: ReadonlySet<string>;
    try {
      await this.consumers.register(consumer);
      old = await this.legacy.processed(
        consumer,
        items.map((i) => i.messageId),
      );
    } catch (failure) {
      return { outcomes: items.map(() => SINGLE), failure, reason: "other" };
    }
    if (old.size === 0) return this.processNewBatch(consumer, items);
    // Markers of the table before 0002 decide their messages; the others go on as a batch of their own.
    const rest = items.filter((i) => !old.has(i.messageId));
    const inner = rest.length > 0 ? await this.processNewBatch(consumer, rest) : { outcomes: [] };
    const outcomes = inner.outcomes.values();
    return {
      ...inner,
      outcomes: items.map((i) => (old.has(i.messageId) ? DUPLICATE : outcomes.next().value!)),
    };
  }

  private async processNewBatch(
    consumer: string,
    items: readonly InboxBatchItem[],
  ): Promise<InboxBatchResult> {
    const result = this.statementsBatch(items)
      ? await processStatementsBatch(this.driver, consumer, items, (item) => this.batchPreChecks(item))
      : await processMarkersBatch(
          this.driver,
          consumer,
          items,
          (item) => this.batchPreChecks(item),
          (item) => this.batchStartsEarly(item),
        );
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

  /** Whether a batch reads for an item's marker first (batch-markers.ts, batch-statements.ts). */
  private batchPreChecks(item: InboxBatchItem): boolean {
    if (this.driver.batchStatements?.returnsInserted) return this.preChecks(item.firstDelivery);
    return this.preCheck !== false;
  }

  /**
   * Whether a batch's handlers may start before its marker insert has answered (batch-markers.ts): a message read
   * for (and so found without a marker), or a first delivery while first deliveries have not been duplicates
   * lately. A duplicate found there rolls back the whole batch, so one such duplicate keeps the handlers waiting
   * for the insert's answer until about 90 fresh first deliveries have followed it.
   */
  private batchStartsEarly(item: InboxBatchItem): boolean {
    if (this.batchPreChecks(item)) return true;
    return item.firstDelivery === true && this.firstDuplicateShare < FIRST_DUPLICATE_SHARE_TO_START_EARLY;
  }

  async isProcessed(key: InboxKey): Promise<boolean> {
    const result = await this.driver.query(this.sql.isProcessed, keyParams(key));
    if (result.rows.length > 0) return true;
    // A marker processed before migration 0002 is in the legacy table while retention keeps it.
    return (await this.legacy.processed(key.consumer, [key.messageId])).size > 0;
  }

  async claim(key: InboxKey, reenter?: string): Promise<InboxClaimOutcome> {
    try {
      await this.consumers.register(key.consumer);
      // A processed marker in the legacy table decides it. A claim left open there (its holder, a worker of the
      // previous version, may be performing its effect) is busy until the sweeper removes it, as in the new table.
      const legacy = await this.legacy.state(key.consumer, key.messageId);
      if (legacy === "processed") return { kind: "duplicate" };
      if (legacy === "open") return { kind: "busy" };
    } catch (error) {
      return this.failed(error, "other");
    }
    try {
      // One statement, so its own transaction: the claim is committed when it returns.
      const result = await this.driver.query<{ id: string | number | null }>(
        this.sql.insertOpenClaim,
        keyParams(key),
      );
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
          ...keyParams(key),
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
        ? await this.driver.query(this.sql.markProcessed, keyParams(key))
        : await this.driver.query(this.sql.markProcessedById, [...keyParams(key), claimId]);
    if (result.rowCount === 1) return;
    // Nothing open to close: fine if this very claim is already processed (a repeated call), lost otherwise.
    const marker = await this.readMarker(key);
    if (marker?.processed && (claimId === undefined || marker.id === claimId)) return;
    throw new ClaimLostError(key, claimId);
  }

  async releaseClaim(key: InboxKey, claimId: string): Promise<boolean> {
    const result = await this.driver.query(this.sql.releaseClaim, [...keyParams(key), claimId]);
    return result.rowCount === 1;
  }

  async sweepStaleClaims(olderThanMs: number): Promise<number> {
    const olderThan = splitMs(olderThanMs, "olderThanMs");
    const result = await this.driver.query(this.sql.sweepStaleClaims, olderThan);
    return result.rowCount + (await this.legacy.sweepStaleClaims(olderThan));
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
    const olderThan = splitMs(retentionMs, "retentionMs");
    const pace = options.pace === undefined ? undefined : checkPace(options.pace);
    // Every instance runs passes; each paces to a multiple of the whole table's insert rate. Two at once would
    // double it and fight over the same ranges, so the pass runs under a lock only one session holds at a time.
    const held = await this.driver.whileHolding(CLEANUP_LOCK, (db) =>
      this.cleanupHeld(db, olderThan, batchSize, { ...options, pace }),
    );
    if (held.held) return held.value;
    options.onSkipped?.(CLEANUP_LOCK_HELD);
    return 0;
  }

  /** One pass, on the connection that holds the cleanup lock. */
  private async cleanupHeld(
    db: SessionQueries,
    olderThan: [number, number],
    batchSize: number,
    options: CleanupOptions,
  ): Promise<number> {
    // One cutoff for the whole run, so rows inserted meanwhile never qualify and the loop ends.
    const cut = await db.query<{ cutoff: Date; cutoffSec: number }>(this.sql.cleanupCutoff, olderThan);
    const { cutoff, cutoffSec } = cut.rows[0] ?? {};
    if (!(cutoff instanceof Date) || !Number.isInteger(cutoffSec))
      throw new Error("inbox cleanup: the database returned no cutoff");
    const run = await cleanupRanges(db, this.sql.cleanupBatch, {
      afterId: this.cleanupAfterId,
      batchSize,
      cutoffSec: cutoffSec!,
      onBatch: options.onBatch,
      pauseMs: options.pauseMs,
      pace: options.pace,
      meter: this.cleanupMeter,
      signal: options.signal,
    });
    this.cleanupAfterId = run.resumeAfterId;
    const legacy = await this.legacy.cleanup(cutoff, batchSize, options.onBatch);
    return run.deleted + legacy;
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
    const result = await this.driver.query<{ id: string | number; processed: unknown }>(
      this.sql.readMarker,
      keyParams(key),
    );
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

/** [messageKey, consumer]: how every single-message statement takes its key. */
function keyParams(key: InboxKey): [Buffer, string] {
  return [messageKey(key.messageId), key.consumer];
}

/** A duration as [whole seconds, remaining milliseconds]: SQL Server's DATEADD takes an int, too small for ms. */
function splitMs(ms: number, name: string): [number, number] {
  if (!Number.isFinite(ms) || ms < 0)
    throw new RangeError(`${name} must be a non-negative number of milliseconds`);
  const whole = Math.floor(ms);
  return [Math.floor(whole / 1000), whole % 1000];
}

/** The session lock a retention pass holds (per inbox: the driver scopes it to the schema). */
const CLEANUP_LOCK = "cleanup";
/** What a pass that found the lock held says in its log. */
export const CLEANUP_LOCK_HELD = "another instance holds the cleanup lock";

/** Rows per cleanup batch: a range of the key, small enough for SQL Server's row locks (escalation at 5,000). */
export const DEFAULT_CLEANUP_BATCH = 2000;

const SINGLE: InboxBatchOutcome = { kind: "single" };
const DUPLICATE: InboxBatchOutcome = { kind: "duplicate" };
