import type { ClaimOutcome, ErrorClass, ProcessOutcome } from "../domain/outcome.ts";
import type { Dialect, SqlExecutor } from "../domain/sql.ts";
import type { CleanupBatch } from "./cleanup.ts";
import type { CleanupPace } from "./cleanup-pace.ts";
import type { ModuleMigrations } from "./migrations.ts";

export type { ModuleMigrations } from "./migrations.ts";

/** The inbox's identity for one handling of one message. */
export interface InboxKey {
  readonly messageId: string;
  readonly consumer: string;
}

export interface MigrationResult {
  readonly applied: readonly string[];
}

/**
 * When to read for a processed marker before opening the transaction: `true` always, `false` never,
 * `"redeliveries"` (the default) for every message but a first delivery (`ProcessHint.firstDelivery`). The read
 * makes a late redelivery cost one indexed read instead of a transaction; on a first delivery, whose marker
 * almost never exists, it is a round trip spent for nothing. The marker's unique index decides either way.
 */
export type PreCheckMode = boolean | "redeliveries";

/** A handler's statement resolved to the store's dialect: its text and its positional parameters. */
export interface BoundStatement {
  readonly sql: string;
  readonly params: readonly unknown[];
}

/** One message of a batch: its inbox key's MessageId and its handler's work. */
export interface InboxBatchItem {
  readonly messageId: string;
  readonly work: (tx: SqlExecutor) => Promise<void>;
  /** As `ProcessHint.firstDelivery`: such a message is left out of the batch's pre-check read. */
  readonly firstDelivery?: boolean;
  /** As `ProcessHint.statements`: a batch whose items all have them goes to the database in one request. */
  readonly statements?: readonly BoundStatement[];
  /**
   * As `ProcessHint.keys` (undefined = unkeyed: may touch anything). Items whose keys are disjoint may run at
   * once on the batch's connection; an item waits for every earlier item that shares a key with it.
   */
  readonly keys?: readonly string[];
}

/**
 * What became of one message of a batch: committed with the others; a duplicate; `failed` when its own handler
 * threw of its own accord (the batch rolled back, and the failure is the message's, as alone); or `single` when
 * the batch could not decide it (another's failure, a statement failed, a key collided on SQL Server) and the
 * caller must process it alone, on the single-message path, which decides it with its own transaction.
 */
export type InboxBatchOutcome =
  | { readonly kind: "committed" | "duplicate" }
  | Extract<ProcessOutcome, { kind: "failed" }>
  | { readonly kind: "single" };

/**
 * Why a batch's transaction did not commit, for the metric: the database chose it as a deadlock's victim, a
 * handler (or one of its statements) failed, its marker insert met a key that exists (SQL Server), or anything
 * else (the pre-check, BEGIN, COMMIT, a lost connection).
 */
export type BatchFailureReason = "deadlock" | "handler_error" | "duplicate" | "other";

export interface InboxBatchResult {
  readonly outcomes: readonly InboxBatchOutcome[];
  /** Why the batch's transaction did not commit, when it did not. */
  readonly failure?: unknown;
  /** The failure's reason (set with `failure`). */
  readonly reason?: BatchFailureReason;
  /** True when no transaction was opened: the pre-check found every message's marker (all duplicates). */
  readonly noTransaction?: boolean;
}

/**
 * Phase 1's result. A winning claim carries `claimId`, the marker row's Id, so that `markProcessed` can tell
 * this claim from a later one taken after the sweeper removed it. Assignable to the domain's ClaimOutcome.
 */
export type InboxClaimOutcome =
  | Exclude<ClaimOutcome, { readonly kind: "claimed" }>
  | {
      readonly kind: "claimed";
      readonly claimId: string;
      /** Set when an earlier attempt's claim was taken over (under a new id) rather than inserted afresh. */
      readonly reentered?: boolean;
    };

export interface CleanupOptions {
  /**
   * Called after each batch with the number of rows it deleted, and (but for the table before 0002) its duration,
   * the wait after it, and the pace's reading of the insert rate.
   */
  onBatch?: (deleted: number, batch?: CleanupBatch) => void;
  /**
   * Deletes at a multiple of the inbox's insert rate, in batches spaced evenly (src/inbox/cleanup-pace.ts;
   * docs/inbox.md, "Retention"). Without it and without `pauseMs`, batches follow each other at once.
   */
  pace?: CleanupPace;
  /**
   * A fixed pause between batches, in milliseconds, instead of the pace (SBINBOX_CLEANUP_PAUSE_MS): leaves the
   * database to the worker's transactions between them, at the cost of a longer pass.
   */
  pauseMs?: number;
  /**
   * Called instead of deleting anything when another instance's pass on this inbox is under way: one pass per
   * inbox at a time, by a session lock on a connection of the pass's own (`reason` says so, for the pass's log).
   */
  onSkipped?: (reason: string) => void;
  /** Ends the pass after the batch under way (a stopping worker, a benchmark's phase); what it deleted stays. */
  signal?: AbortSignal;
}

/** What the caller knows of a message before its transaction: for the pre-check (`InboxStoreOptions`), its keys. */
export interface ProcessHint {
  /**
   * The broker's first delivery of the message itself (not a redelivery, a scheduled retry or a replayed copy):
   * its marker almost never exists, so with the default pre-check mode the store skips the read.
   */
  readonly firstDelivery?: boolean;
  /**
   * The message's work as data (a statements handler's, resolved to the dialect): the store may send them, with
   * the marker, together instead of running `work`, which runs the same statements through the handle.
   */
  readonly statements?: readonly BoundStatement[];
  /**
   * The rows the message's handler may touch, as it declares them (`keys` of the handler, docs/batching.md);
   * undefined: any row. Only batches use them (messages with disjoint keys run side by side); `process` ignores
   * them.
   */
  readonly keys?: readonly string[];
}

/**
 * The port every database adapter implements; the conformance suite runs against each one.
 * An adapter owns its connection pool.
 */
export interface InboxStore {
  readonly dialect: Dialect;
  /**
   * A batch's handlers whose keys are disjoint run side by side on its connection (PostgreSQL's pipeline mode);
   * false or absent: one after another (SQL Server). SBINBOX_BATCH_SIZE=auto batches code handlers only then.
   */
  readonly handlersSideBySide?: boolean;

  /**
   * Applies pending migrations, the inbox's then the module's, in one transaction; a no-op when none are
   * pending; safe when two instances run it at once. Needs DDL rights: `sbinbox migrate` runs it, never the worker.
   */
  migrate(module?: ModuleMigrations): Promise<MigrationResult>;

  /** Read-only: the migrations not applied yet (inbox's, then the module's as `module:name`). */
  pendingMigrations(module?: ModuleMigrations): Promise<string[]>;

  /**
   * One transaction: insert the marker first (its key lock makes a concurrent duplicate wait here),
   * run `work` on the same transaction, commit. The marker's unique violation yields `duplicate`;
   * any other error rolls back and yields `failed`.
   */
  process(
    key: InboxKey,
    work: (tx: SqlExecutor) => Promise<void>,
    hint?: ProcessHint,
  ): Promise<ProcessOutcome>;

  /**
   * Several messages of one consumer in one transaction (distinct MessageIds): each comes back committed,
   * duplicate, or `single` when the batch could not decide it and it must go through `process` alone. Optional:
   * a store without it processes every message alone.
   */
  processBatch?(consumer: string, items: readonly InboxBatchItem[]): Promise<InboxBatchResult>;

  /** The fast-path read: a marker for this key exists and is processed. Correctness never depends on it. */
  isProcessed(key: InboxKey): Promise<boolean>;

  /**
   * Two-phase, phase 1: insert the marker with ProcessedUtc null and commit. Given `reenter`, the id of a claim
   * this caller took on an earlier attempt, an open claim with that id is taken over under a new id and returned
   * as `claimed` instead of `busy`; only one caller can take over a given id.
   */
  claim(key: InboxKey, reenter?: string): Promise<InboxClaimOutcome>;
  /**
   * Two-phase, phase 3: record that the external effect happened. Idempotent for a processed marker.
   * Throws ClaimLostError when the claim is gone (swept) or, given `claimId`, now belongs to another claimant.
   */
  markProcessed(key: InboxKey, claimId?: string): Promise<void>;
  /**
   * Gives up the open claim `claimId` (its message is dead-lettered), so a replay claims afresh at once instead of
   * finding it busy until the sweeper frees it. False when it is no longer open under that id.
   */
  releaseClaim(key: InboxKey, claimId: string): Promise<boolean>;
  /** Makes claims open longer than `olderThanMs` retryable; returns how many. */
  sweepStaleClaims(olderThanMs: number): Promise<number>;
  /** Number of claims still open (for metrics). */
  countOpenClaims(): Promise<number>;

  /**
   * Deletes rows older than `retentionMs` in batches of `batchSize`; returns the number deleted. One instance's
   * pass at a time per inbox: while another holds the cleanup lock this deletes nothing (`onSkipped`) and gives 0.
   */
  cleanup(retentionMs: number, batchSize?: number, options?: CleanupOptions): Promise<number>;

  /**
   * Classifies an error raised by this adapter's driver outside the marker insert, so never `duplicate`:
   * only `process` and `claim` know which statement failed, and they report duplicates as outcomes.
   */
  classify(error: unknown): ErrorClass;

  /** A cheap round trip, used as the readiness probe and to end an outage pause. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
