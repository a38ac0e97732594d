import {
  context,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Link,
} from "@opentelemetry/api";
import { inKeyOrder } from "../domain/key-order.ts";
import type { ProcessOutcome } from "../domain/outcome.ts";
import type { SqlExecutor } from "../domain/sql.ts";
import type { BatchFailureReason, InboxBatchItem, InboxBatchResult } from "../inbox/core.ts";
import type { InboxKey, InboxStore, ProcessHint } from "../inbox/store.ts";
import { errorType } from "../servicebus/tracing.ts";
import type { Logger } from "../telemetry/logger.ts";
import { Attr, SpanName, TRACER_NAME } from "../telemetry/names.ts";
import { UNTRACED } from "../telemetry/recording.ts";

export interface BatcherOptions {
  readonly store: InboxStore;
  readonly consumer: string;
  /** The most messages per transaction (at least 2; a batch of 1 is the single-message path). */
  readonly maxSize: number;
  /**
   * How long the first message of a batch waits for more before the batch runs. 0: no wait of its own; what is
   * pending runs once the messages that arrived in the same turn of the event loop have joined it, if a batch could
   * start now, and otherwise when one ends (group commit: a batch forms from what arrives while others run).
   */
  readonly waitMs: number;
  /**
   * Most batch transactions running at once (default DEFAULT_BATCH_MAX_IN_FLIGHT). They are assigned by key: no
   * key is in two at once, so batches of handlers that declare their keys share no rows and cannot deadlock each
   * other; a batch holding an unkeyed message (its handler declares no keys: it may touch anything) runs with no
   * other beside it, as every batch did when only one ran at a time.
   */
  readonly maxInFlight?: number;
  /** Each batch that ran, with its size and how it ended (metrics). */
  readonly onBatch?: (size: number, outcome: BatchOutcome) => void;
  /** Where a batch that rolled back is logged (its messages' own lines follow as each is decided). */
  readonly logger?: Logger;
  /**
   * Which messages join batches; the others go alone, on the store's single path. Unset: all of them.
   * `joinsWherePays` is SBINBOX_BATCH_SIZE=auto's rule.
   */
  readonly joins?: (hint: ProcessHint | undefined) => boolean;
}

/**
 * SBINBOX_BATCH_SIZE=auto's rule: a message joins a batch where batching measured faster than a transaction each
 * (docs/batching.md): its handler declares keys, and either the store runs a batch's handlers side by side or the
 * handler is a statements handler (a batch of them goes in one request). Unkeyed handlers run one batch at a time
 * with their handlers one after another, and code handlers on SQL Server one after another: both go alone.
 */
export function joinsWherePays(store: InboxStore): (hint: ProcessHint | undefined) => boolean {
  return (hint) =>
    hint?.keys !== undefined && (store.handlersSideBySide === true || hint.statements !== undefined);
}

/**
 * How a batch ended: its transaction committed; no transaction was needed (the pre-check found every message's
 * marker); or why its transaction failed, when its messages went on alone.
 */
export type BatchOutcome = "committed" | "all_duplicate" | BatchFailureReason;

/** Batch transactions one worker runs at once unless told otherwise (docs/batching.md says how it was chosen). */
export const DEFAULT_BATCH_MAX_IN_FLIGHT = 4;

interface Entry {
  readonly key: InboxKey;
  readonly work: (tx: SqlExecutor) => Promise<void>;
  readonly hint: ProcessHint | undefined;
  readonly ctx: Context;
  readonly resolve: (outcome: ProcessOutcome) => void;
}

/** A formed batch and the keys it holds while it runs: undefined when one of its messages is unkeyed (any row). */
interface Batch {
  readonly entries: readonly Entry[];
  readonly keys: ReadonlySet<string> | undefined;
}

function batchOf(entries: readonly Entry[]): Batch {
  const keys = new Set<string>();
  for (const entry of entries) {
    if (entry.hint?.keys === undefined) return { entries, keys: undefined };
    for (const key of entry.hint.keys) keys.add(key);
  }
  return { entries, keys };
}

/**
 * Group commit for transactional handlers. The messages whose SDK callbacks are pending (so the SDK keeps renewing
 * their locks) join a batch; the batch runs as one transaction, and each message's promise settles with its own
 * outcome. A message whose handler threw of its own accord gets that failure as its outcome, as alone; one the
 * batch could not decide (another's failure, a statement failed, so the batch rolled back) goes through the
 * store's single-message `process`, as if there were no batch. Either way its retries and outage handling are
 * those of the single path. No outcome is ever taken from another message.
 */
export class Batcher {
  private readonly options: BatcherOptions;
  private pending: Entry[] = [];
  private timer: NodeJS.Timeout | undefined;
  private turn: NodeJS.Immediate | undefined;
  /** Formed batches in arrival order, waiting for room or for a batch that holds one of their keys. */
  private readonly ready: Batch[] = [];
  private readonly inFlight = new Set<Batch>();
  private readonly maxInFlight: number;

  constructor(options: BatcherOptions) {
    if (!Number.isInteger(options.maxSize) || options.maxSize < 2)
      throw new RangeError("a batcher's maxSize must be a whole number of at least 2");
    const inFlight = options.maxInFlight ?? DEFAULT_BATCH_MAX_IN_FLIGHT;
    if (!Number.isInteger(inFlight) || inFlight < 1)
      throw new RangeError("a batcher's maxInFlight must be a whole number of at least 1");
    this.options = options;
    this.maxInFlight = inFlight;
  }

  /** Formed batches waiting for room, or for a batch in flight that holds one of their keys. */
  get queued(): number {
    return this.ready.length;
  }

  /** Processes one message's transactional work, in a batch with others when there are any. */
  process(
    key: InboxKey,
    work: (tx: SqlExecutor) => Promise<void>,
    hint?: ProcessHint,
  ): Promise<ProcessOutcome> {
    // The same key twice (an original and its scheduled copy) goes alone: its marker insert waits for the batch's.
    if (
      key.consumer !== this.options.consumer ||
      this.options.joins?.(hint) === false ||
      this.pending.some((e) => e.key.messageId === key.messageId)
    )
      return this.options.store.process(key, work, hint);
    return new Promise<ProcessOutcome>((resolve) => {
      this.pending.push({ key, work, hint, ctx: context.active(), resolve });
      if (this.pending.length >= this.options.maxSize) this.flush();
      else if (this.options.waitMs > 0) this.timer ??= setTimeout(() => this.flush(), this.options.waitMs);
      // setImmediate runs after the rest of this I/O turn: the messages of one read from the broker join first.
      else
        this.turn ??= setImmediate(() => {
          this.turn = undefined;
          if (this.roomNow()) this.flush();
        });
    });
  }

  /**
   * Whether what is pending may form a batch now: a slot is free and no unkeyed batch runs or waits (nothing passes
   * that one, so what comes meanwhile joins one batch behind it). A batch waiting in line for a key held in flight
   * does not stop it: next() starts the new one only if it shares no key with those in flight or before it in line.
   */
  private roomNow(): boolean {
    if (this.inFlight.size >= this.maxInFlight) return false;
    for (const batch of this.inFlight) if (batch.keys === undefined) return false;
    for (const batch of this.ready) if (batch.keys === undefined) return false;
    return true;
  }

  /** Runs what is pending now instead of waiting (a stop). */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const entries = this.pending;
    this.pending = [];
    if (entries.length > 0) this.ready.push(batchOf(entries));
    this.next();
  }

  /**
   * Starts the formed batches that may run now, in arrival order: a keyed batch when it shares no key with a batch
   * in flight or with an earlier batch still waiting (so per key the arrival order holds), an unkeyed batch only
   * first in line with nothing in flight; nothing passes a waiting unkeyed batch.
   */
  private next(): void {
    const taken = new Set<string>();
    let all = false;
    for (const batch of this.inFlight) {
      if (batch.keys === undefined) all = true;
      else for (const key of batch.keys) taken.add(key);
    }
    let i = 0;
    while (i < this.ready.length && this.inFlight.size < this.maxInFlight && !all) {
      const batch = this.ready[i]!;
      const free =
        batch.keys === undefined
          ? i === 0 && this.inFlight.size === 0
          : ![...batch.keys].some((key) => taken.has(key));
      if (batch.keys === undefined) all = true;
      else for (const key of batch.keys) taken.add(key);
      if (!free) {
        i += 1;
        continue;
      }
      this.ready.splice(i, 1);
      this.inFlight.add(batch);
      void this.run(batch.entries).finally(() => {
        this.inFlight.delete(batch);
        // With no wait of its own, what arrived while the slots were full forms the next batch now.
        if (this.options.waitMs === 0 && this.pending.length > 0) this.flush();
        else this.next();
      });
    }
  }

  /** Resolves once every message of the batch is decided, those that went alone included. */
  private async run(entries: readonly Entry[]): Promise<void> {
    const { store } = this.options;
    if (entries.length === 1 || store.processBatch === undefined) {
      await this.alone(entries);
      return;
    }
    let result: InboxBatchResult;
    try {
      result = await this.transaction(entries);
    } catch {
      // processBatch does not throw for database or handler failures; anything else still leaves no one behind.
      result = { outcomes: entries.map(() => ({ kind: "single" })), failure: true, reason: "other" };
    }
    const outcome = outcomeOf(result);
    this.options.onBatch?.(entries.length, outcome);
    if (result.failure !== undefined) this.logRollback(entries, result, outcome);
    const single: Entry[] = [];
    entries.forEach((entry, i) => {
      const outcome = result.outcomes[i]!;
      if (outcome.kind === "single") single.push(entry);
      else entry.resolve(outcome);
    });
    await this.alone(single);
  }

  /**
   * A batch that rolled back, at warn (info when a marker it met made it: a duplicate, decided). Without this line a
   * failure that the messages' runs alone then got past would show in the batch's span and metric only.
   */
  private logRollback(entries: readonly Entry[], result: InboxBatchResult, reason: BatchOutcome): void {
    const fields = {
      batchSize: entries.length,
      reason,
      error: result.failure,
      messageIds: entries.slice(0, 8).map((e) => e.key.messageId),
      failed: result.outcomes.filter((o) => o.kind === "failed").length,
      alone: result.outcomes.filter((o) => o.kind === "single").length,
    };
    const line = `a batch of ${entries.length} rolled back (${reason}); its undecided messages go alone`;
    if (reason === "duplicate") this.options.logger?.info(line, fields);
    else this.options.logger?.warn(line, fields);
  }

  /**
   * The batch's transaction: one span, a child of the first recorded message's process span (so a parent-based
   * sampler keeps it whenever that message is kept), linked from each other recorded message's process span and
   * linking to each. A batch none of whose messages is recorded (all sampled out) has no span: its transaction runs
   * under the first message's non-recording process span, so the worker's statements start none, and any span a
   * library starts inside (pg/mssql instrumentation) is a non-recorded child in that message's trace, not a new root
   * (docs/telemetry.md, "Sampling").
   */
  private transaction(entries: readonly Entry[]): Promise<InboxBatchResult> {
    const recorded = entries.map((e) => trace.getSpan(e.ctx)).filter((s) => s?.isRecording() === true);
    const items = entries.map(itemOf);
    const run = () => this.options.store.processBatch!(this.options.consumer, items);
    const first = recorded[0];
    if (first === undefined) return context.with(untracedBatch(entries), run);
    const links: Link[] = recorded.slice(1).map((s) => ({ context: s!.spanContext() }));
    const span = trace
      .getTracer(TRACER_NAME)
      .startSpan(
        SpanName.inboxBatch,
        { kind: SpanKind.INTERNAL, links, attributes: { [Attr.batchMessageCount]: entries.length } },
        trace.setSpan(ROOT_CONTEXT, first),
      );
    for (const own of recorded.slice(1)) own!.addLink({ context: span.spanContext() });
    return context.with(trace.setSpan(ROOT_CONTEXT, span), run).then(
      (result) => {
        const committed = result.outcomes.filter((o) => o.kind === "committed").length;
        span.setAttribute(Attr.batchCommitted, committed);
        if (result.failure !== undefined) {
          span.setAttribute(Attr.errorType, errorType(result.failure));
          span.setStatus({ code: SpanStatusCode.ERROR });
        }
        span.end();
        return result;
      },
      (error: unknown) => {
        span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
        throw error;
      },
    );
  }

  /**
   * Messages the batch could not decide, each in a transaction of its own on the store's single path, while the
   * batch still holds their keys: per key one after another in arrival order (so a later message of a key never
   * overtakes an earlier one), unkeyed ones at once as they always went alone.
   */
  private async alone(entries: readonly Entry[]): Promise<void> {
    const one = (entry: Entry): Promise<void> =>
      context
        .with(entry.ctx, () => this.options.store.process(entry.key, entry.work, entry.hint))
        .then(entry.resolve, (error: unknown) =>
          entry.resolve({ kind: "failed", error, errorClass: "permanent" }),
        );
    const keyed = entries.filter((e) => e.hint?.keys !== undefined);
    await Promise.all([
      ...entries.filter((e) => e.hint?.keys === undefined).map(one),
      inKeyOrder(keyed, (e) => e.hint?.keys, one),
    ]);
  }
}

/**
 * The context of a batch none of whose messages is recorded: the first message's own (non-recording) process span,
 * or, when it has none, one that carries no trace at all.
 */
function untracedBatch(entries: readonly Entry[]): Context {
  const span = trace.getSpan(entries[0]!.ctx);
  return span === undefined ? UNTRACED : trace.setSpan(ROOT_CONTEXT, span);
}

/** One message as the batch's transaction takes it. */
function itemOf(entry: Entry): InboxBatchItem {
  return {
    messageId: entry.key.messageId,
    firstDelivery: entry.hint?.firstDelivery,
    statements: entry.hint?.statements,
    keys: entry.hint?.keys,
    // Each handler runs in its own message's context, so its log lines and spans belong to that message.
    work: (tx) => context.with(entry.ctx, () => entry.work(tx)),
  };
}

function outcomeOf(result: InboxBatchResult): BatchOutcome {
  if (result.failure !== undefined) return result.reason ?? "other";
  return result.noTransaction ? "all_duplicate" : "committed";
}
