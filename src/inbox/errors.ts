import type { InboxKey } from "./store.ts";

/**
 * `markProcessed` found no open claim of its own: the sweeper made it retryable (and perhaps another claimant
 * took it). The external effect may run again under the same idempotency key; the caller must not settle the
 * message as if its claim had been recorded.
 */
export class ClaimLostError extends Error {
  readonly messageId: string;
  readonly consumer: string;
  constructor(key: InboxKey, claimId: string | undefined) {
    super(
      `inbox claim for message "${key.messageId}" (consumer "${key.consumer}")` +
        `${claimId === undefined ? "" : ` with claim id ${claimId}`} is no longer open`,
    );
    this.name = "ClaimLostError";
    this.messageId = key.messageId;
    this.consumer = key.consumer;
  }
}

/**
 * A handler sent a statement that would end its transaction or change its session (COMMIT, ROLLBACK, a session
 * SET...): it is refused before it reaches the database, and the transaction is rolled back, never committed.
 */
export class TransactionControlError extends Error {
  readonly statement: string;
  constructor(statement: string) {
    super(
      `a handler may not send ${statement} through its transaction: the inbox begins, commits and rolls back ` +
        `the transaction itself, and session settings would outlive the message on a pooled connection`,
    );
    this.name = "TransactionControlError";
    this.statement = statement;
  }
}

/**
 * A handler running beside other messages' handlers on a batch's one transaction (keyed, on a connection that
 * pipelines) sent a savepoint command: ROLLBACK TO would undo the other messages' writes interleaved since the
 * savepoint, and they would commit without them. Refused before it is sent; the batch rolls back and each of its
 * messages goes alone, where the handler's savepoints reach only its own writes.
 */
export class SavepointInBatchError extends Error {
  readonly statement: string;
  constructor(statement: string) {
    super(
      `a handler running beside other messages in a batch may not send ${statement}: it would reach the other ` +
        `messages' writes; the batch is rolled back and its messages go one by one`,
    );
    this.name = "SavepointInBatchError";
    this.statement = statement;
  }
}

/** A statement the handler did not await was still running when it returned, and then failed. */
export class UnawaitedStatementError extends Error {
  constructor(cause: unknown) {
    super("a statement the handler did not await failed after the handler returned; nothing was committed", {
      cause,
    });
    this.name = "UnawaitedStatementError";
  }
}

/**
 * A batch whose handlers started beside its marker insert found markers of some of its messages already there (a
 * first delivery resent past the duplicate window, or a concurrent delivery that committed first): those messages
 * are duplicates, and since their handlers wrote beside the others the batch rolled back; the others go alone.
 */
export class MarkerExistsError extends Error {
  readonly messageIds: readonly string[];
  constructor(messageIds: readonly string[]) {
    super(
      `the inbox markers of ${messageIds.length} message(s) of the batch exist already (${messageIds.slice(0, 3).join(", ")}` +
        `${messageIds.length > 3 ? ", ..." : ""}): they are duplicates; the batch rolled back and its other messages go alone`,
    );
    this.name = "MarkerExistsError";
    this.messageIds = messageIds;
  }
}
