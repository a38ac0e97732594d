import { runBatchHandlers } from "./batch-handlers.ts";
import { failed as failedAlone } from "./batch-statements.ts";
import { batchFailure, markerParams, preCheckBatch } from "./batch-precheck.ts";
import { messageIdOfKey } from "./message-key.ts";
import type { InboxDriver, InboxTransaction } from "./driver.ts";
import { MarkerExistsError } from "./errors.ts";
import type { BatchFailureReason, InboxBatchItem, InboxBatchOutcome, InboxBatchResult } from "./store.ts";

/**
 * A batch of code handlers (or a mixed one) in one transaction: one read for the markers that exist (of the items
 * `readsFor` picks), one insert of the others' markers, the handlers (side by side where their keys are disjoint:
 * batch-handlers.ts; started before the insert has answered when every item `startsEarly`), one commit. Any
 * failure rolls the whole batch back; its undecided messages come back as `single`. Keys must be distinct.
 */
export async function processMarkersBatch(
  driver: InboxDriver,
  consumer: string,
  items: readonly InboxBatchItem[],
  readsFor: (item: InboxBatchItem) => boolean,
  startsEarly: (item: InboxBatchItem) => boolean = () => false,
): Promise<InboxBatchResult> {
  const batch = driver.batchStatements;
  const outcomes: InboxBatchOutcome[] = items.map(() => ({ kind: "single" }));
  if (batch === undefined || items.length === 0) return { outcomes };
  if (items.length > batch.maxRows || new Set(items.map((i) => i.messageId)).size !== items.length)
    throw new RangeError(`a batch takes 1 to ${batch.maxRows} messages with distinct MessageIds`);
  const params = (ids: readonly string[]): unknown[] => markerParams(driver, consumer, ids);
  // Only the messages the mode reads for; first deliveries meet an existing marker at the insert instead. Where
  // the insert cannot skip an existing key (SQL Server), one such key fails the whole batch, and every message
  // then takes a transaction of its own: there the read, one per batch, is always made.
  const checked = await preCheckBatch(driver, consumer, items, readsFor, outcomes);
  if ("failure" in checked)
    return { outcomes, failure: checked.failure, reason: batchFailure(driver, checked.failure, "other") };
  // Nothing left to write: no transaction opened, so none committed (the metric says so).
  if (checked.open.length === 0) return { outcomes, noTransaction: true };
  let open = checked.open;
  let tx: InboxTransaction;
  try {
    tx = await driver.begin();
  } catch (failure) {
    return { outcomes, failure, reason: batchFailure(driver, failure, "other") };
  }
  const undecided = (failure: unknown, reason: BatchFailureReason): InboxBatchResult => ({
    outcomes: outcomes.map((o) => (o.kind === "duplicate" ? o : SINGLE)),
    failure,
    reason: batchFailure(driver, failure, reason),
  });
  // The keys in one order (code-unit order; any fixed order does), so two batches sharing keys take their key
  // locks in that order and cannot deadlock on them: SQL Server's VALUES rows go in as given, PostgreSQL's
  // statement sorts them again itself (ORDER BY m). The handlers still run in arrival order.
  const markers = tx
    .query<{ mkey: Uint8Array }>(
      batch.insertMarkers(open.length),
      params(open.map((i) => items[i]!.messageId).sort()),
    )
    .then(
      (inserted) => ({
        fresh: batch.returnsInserted ? new Set(inserted.rows.map((r) => messageIdOfKey(r.mkey))) : undefined,
      }),
      (failure: unknown) => ({ failure }),
    );
  const runHandlers = (which: readonly number[]) =>
    runBatchHandlers(
      tx,
      driver.dialect,
      items,
      which,
      driver.concurrentStatements === true,
      (error) => driver.isDeadlock?.(error) === true,
    );
  // On a connection that pipelines, the handlers' first statements can go out right behind the insert, without
  // waiting for its answer: a round trip less for the batch. A marker that turns out to exist then rolls the whole
  // batch back (that message's handler has written beside the others), so they start early only for messages
  // unlikely to be duplicates (`early`).
  const early = driver.concurrentStatements === true && open.every((i) => startsEarly(items[i]!));
  const handlers = early ? runHandlers(open) : undefined;
  const marked = await markers;
  if ("failure" in marked) {
    await handlers;
    await tx.rollback();
    const reason = driver.classify(marked.failure, "marker") === "duplicate" ? "duplicate" : "other";
    return undecided(marked.failure, reason);
  }
  // Decided from the keys the database returns, never from an error's text.
  const fresh = marked.fresh;
  const existing = fresh === undefined ? [] : open.filter((i) => !fresh.has(items[i]!.messageId));
  for (const i of existing) outcomes[i] = DUPLICATE;
  if (handlers !== undefined && existing.length > 0) {
    const ran = await handlers;
    await tx.rollback();
    // A handler of a fresh message that threw of its own accord keeps its failure, as below.
    const result = undecided(new MarkerExistsError(existing.map((i) => items[i]!.messageId)), "duplicate");
    return withThrown(driver, result, ran?.thrown);
  }
  open = open.filter((i) => !existing.includes(i));
  const failed = await (handlers ?? runHandlers(open));
  if (failed !== undefined) {
    await tx.rollback();
    const result = undecided(failed.failure, failed.deadlock ? "deadlock" : "handler_error");
    return withThrown(driver, result, failed.thrown);
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

const SINGLE: InboxBatchOutcome = { kind: "single" };
const DUPLICATE: InboxBatchOutcome = { kind: "duplicate" };
const COMMITTED: InboxBatchOutcome = { kind: "committed" };

/**
 * The messages whose handlers threw of their own accord (no statement of theirs failed; batch-handlers.ts) fail as
 * they would alone, so their retry policy, a RetryAfterError's delay and their attempt count apply; the others go
 * alone. A duplicate stays a duplicate.
 */
function withThrown(
  driver: InboxDriver,
  result: InboxBatchResult,
  thrown: ReadonlyMap<number, unknown> | undefined,
): InboxBatchResult {
  if (thrown === undefined || thrown.size === 0) return result;
  const outcomes = result.outcomes.map((o, i) =>
    o.kind === "single" && thrown.has(i) ? failedAlone(driver, thrown.get(i)) : o,
  );
  return { ...result, outcomes };
}
