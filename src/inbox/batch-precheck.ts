// The two batch paths' shared steps (batch-markers.ts for code handlers, batch-statements.ts for statements), typed
// by what they read of a driver so that driver.ts, which names the statements path's types, is not imported here.
import type { SqlResult } from "../domain/sql.ts";
import type { BatchFailureReason, InboxBatchItem, InboxBatchOutcome } from "./store.ts";
import { messageIdOfKey, messageKey } from "./message-key.ts";

/** What the pre-check needs of a driver (the statements path's driver has no more). */
export interface MarkerReader {
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
  readonly batchStatements?: { readonly arrays: boolean; isProcessed(rows: number): string };
}

/**
 * A batch's pre-check: one read for the markers of the items `readsFor` picks. Those found are set `duplicate` in
 * `outcomes`; returns the indices of the others (all of them when none is read for), or the read's failure.
 */
export async function preCheckBatch(
  driver: MarkerReader,
  consumer: string,
  items: readonly InboxBatchItem[],
  readsFor: (item: InboxBatchItem) => boolean,
  outcomes: InboxBatchOutcome[],
): Promise<{ readonly open: number[] } | { readonly failure: unknown }> {
  const open = items.map((_, i) => i);
  const checked = items.filter(readsFor);
  if (checked.length === 0) return { open };
  let found;
  try {
    found = await driver.query<{ mkey: Uint8Array }>(
      driver.batchStatements!.isProcessed(checked.length),
      markerParams(
        driver,
        consumer,
        checked.map((i) => i.messageId),
      ),
    );
  } catch (failure) {
    return { failure };
  }
  const done = new Set(found.rows.map((r) => messageIdOfKey(r.mkey)));
  items.forEach((item, i) => {
    if (done.has(item.messageId)) outcomes[i] = DUPLICATE;
  });
  return { open: open.filter((i) => !done.has(items[i]!.messageId)) };
}

/** The parameters of a batch's marker statements: an array and the consumer, or the consumer and each key. */
export function markerParams(driver: MarkerReader, consumer: string, ids: readonly string[]): unknown[] {
  return idParams(driver.batchStatements!.arrays, consumer, ids.map(messageKey));
}

/** [values[], consumer] for a statement that takes arrays, else [consumer, ...values]. */
export function idParams(arrays: boolean, consumer: string, values: readonly unknown[]): unknown[] {
  return arrays ? [values, consumer] : [consumer, ...values];
}

/** A deadlock wherever it happened, else the reason the failing step gives. */
export function batchFailure(
  driver: { isDeadlock?(error: unknown): boolean },
  failure: unknown,
  otherwise: BatchFailureReason,
): BatchFailureReason {
  return driver.isDeadlock?.(failure) ? "deadlock" : otherwise;
}

const DUPLICATE: InboxBatchOutcome = { kind: "duplicate" };
