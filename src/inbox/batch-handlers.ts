import { inKeyOrder } from "../domain/key-order.ts";
import type { Dialect } from "../domain/sql.ts";
import type { InboxBatchItem } from "./store.ts";
import { TransactionHandle, type StatementRunner } from "./transaction-handle.ts";

/** Why a batch's handlers did not all succeed: the first failure, and whether any was a deadlock's. */
export interface BatchHandlersFailure {
  readonly failure: unknown;
  readonly deadlock: boolean;
  /**
   * The items (by index in `items`) whose handlers threw of their own accord, each with its error: no statement of
   * theirs failed or was refused, and no deadlock in the batch. Such a failure is the handler's verdict, not the
   * batch's doing, so its message takes it as its outcome (the retry policy judges it, as alone) instead of running
   * again alone. Empty when the batch met a deadlock.
   */
  readonly thrown: ReadonlyMap<number, unknown>;
}

/**
 * Runs the handlers of a batch's open items on its one transaction. Items keep arrival order: an item starts once
 * every earlier item that shares a key with it has finished (its handler returned and every statement it sent has
 * ended); an unkeyed item shares with all, so it waits for everything before it and everything after waits for
 * it. Items whose keys are disjoint run at once when the driver can run statements concurrently on one
 * connection (pg's pipeline mode sends their statements back to back); otherwise every item is treated as unkeyed,
 * one after another. Each item has its own TransactionHandle: what it left running is waited for before it counts
 * as finished, and it can send nothing once it has. A handler that runs beside others (keyed, concurrently) is
 * held to what cannot reach their writes: its savepoint commands are refused (ROLLBACK TO would undo their
 * interleaved writes), and a statement of its that failed fails the batch even when the handler caught the
 * error (without a savepoint nothing can recover its transaction). Either way its messages go alone, where
 * savepoints are safe. The first failure stops new starts; the running items are waited for; the caller rolls
 * back. Never throws.
 */
export async function runBatchHandlers(
  tx: StatementRunner,
  dialect: Dialect,
  items: readonly InboxBatchItem[],
  open: readonly number[],
  concurrent: boolean,
  isDeadlock: (error: unknown) => boolean,
): Promise<BatchHandlersFailure | undefined> {
  let first: unknown;
  let failed = false;
  let deadlock = false;
  const thrown = new Map<number, unknown>();
  const fail = (failure: unknown, statementFailure: unknown, own?: number): void => {
    // A handler that caught its statement's deadlock and threw its own error still failed by the deadlock.
    deadlock ||= isDeadlock(failure) || (statementFailure !== undefined && isDeadlock(statementFailure));
    // Every handler that throws of its own accord, not only the first: side by side, several may (a downstream
    // that is down for all of them).
    if (own !== undefined && statementFailure === undefined && !isDeadlock(failure)) thrown.set(own, failure);
    if (failed) return;
    failed = true;
    first = failure;
  };
  const run = async (item: InboxBatchItem, index: number): Promise<void> => {
    if (failed) return;
    // An unkeyed item runs with nothing beside it (inKeyOrder): it keeps the single path's rules.
    const alongside = concurrent && item.keys !== undefined;
    const handle = new TransactionHandle(dialect, tx, alongside);
    try {
      await item.work(handle.executor);
    } catch (failure) {
      const refused = await handle.end();
      fail(failure, handle.statementFailure ?? refused, index);
      return;
    }
    // Statements the handler left running are waited for; one that failed, or a refused one, fails the batch.
    const problem = await handle.end();
    if (problem !== undefined) fail(problem, undefined);
    else if (alongside && handle.statementFailure !== undefined) fail(handle.statementFailure, undefined);
  };
  await inKeyOrder(
    open.map((i) => ({ item: items[i]!, index: i })),
    ({ item }) => (concurrent ? item.keys : undefined),
    ({ item, index }) => run(item, index),
  );
  if (!failed) return undefined;
  // A deadlock anywhere in the batch may be why the handler threw: then it goes alone too.
  return { failure: first, deadlock, thrown: deadlock ? new Map() : thrown };
}
