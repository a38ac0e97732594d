import type { ErrorClass, ProcessOutcome } from "../domain/outcome.ts";
import type { Dialect, SqlExecutor, SqlResult } from "../domain/sql.ts";
import { TransactionControlError } from "./errors.ts";
import { noteFailedStatement, statementsText } from "./failed-statement.ts";
import { refusedStatement } from "./transaction-guard.ts";
import { batchFailure, markerParams, preCheckBatch } from "./batch-precheck.ts";
import { messageKey } from "./message-key.ts";
import { composeStatements, type ComposedRequest, type ComposedTransaction } from "./sqlserver/compose.ts";
import type {
  BatchFailureReason,
  BoundStatement,
  InboxBatchItem,
  InboxBatchOutcome,
  InboxBatchResult,
  InboxKey,
} from "./store.ts";

/**
 * The statements kind's paths through the inbox: a message's statements (a StatementsHandler's, as data) sent with
 * its marker in one go, and a batch of such messages in one request where the database allows. PostgreSQL: BEGIN,
 * the markers, every statement and COMMIT given together on one pipelining connection (one write). SQL Server: one
 * T-SQL batch that opens, writes and commits the transaction itself (`StatementRequests`). Any failure in a batch
 * rolls it back and its messages go one by one (`single`), as a batch of code handlers does.
 */

/** How a driver sends a transaction of statements as requests of its own (SQL Server: one T-SQL batch). */
export interface StatementRequests {
  /** The markers ([consumer, ids sorted]) and each message's statements as one transaction's requests. */
  compose(
    consumer: string,
    ids: readonly string[],
    messages: readonly (readonly BoundStatement[])[],
  ): ComposedTransaction;
  /** True when the error is the composed marker insert's: a marker of the request exists (a duplicate). */
  markerExists(error: unknown): boolean;
}

/** What these paths need of a driver (a structural part of core.ts's InboxDriver). */
export interface StatementsDriver {
  readonly dialect: Dialect;
  readonly statements: { readonly insertProcessedMarker: string };
  readonly batchStatements?: {
    readonly arrays: boolean;
    readonly returnsInserted: boolean;
    isProcessed(rows: number): string;
    insertMarkers(rows: number): string;
    /** Inserts the markers failing whole on one that exists; absent when insertMarkers already does. */
    insertMarkersOrFail?(rows: number): string;
  };
  readonly statementRequests?: StatementRequests;
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
  begin(): Promise<{
    query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
    commit(): Promise<void>;
    rollback(): Promise<void>;
  }>;
  classify(error: unknown, origin: "marker" | "other"): ErrorClass;
  isDeadlock?(error: unknown): boolean;
}

type Failed = Extract<ProcessOutcome, { kind: "failed" }>;

/** A failure of the message's own, classed as the single path classes it: never a duplicate outside the marker. */
export function failed(driver: Pick<StatementsDriver, "classify">, error: unknown): Failed {
  const errorClass = driver.classify(error, "other");
  return { kind: "failed", error, errorClass: errorClass === "duplicate" ? "permanent" : errorClass };
}

/**
 * A statements handler's work on the handle's path (a mixed batch, a store that ignores the hint): on SQL Server
 * one request, the parameters renumbered; elsewhere the statements in order.
 */
export async function runStatements(tx: SqlExecutor, statements: readonly BoundStatement[]): Promise<void> {
  if (statements.length === 0) return;
  if (tx.dialect === "sqlserver") {
    const request = composeStatements(statements);
    try {
      await tx.query(request.sql, request.params);
    } catch (error) {
      // Named by the handler's own texts, not the composed request with its parameters renumbered.
      noteFailedStatement(error, statementsText(statements), true);
      throw error;
    }
    return;
  }
  await Promise.all(statements.map((s) => tx.query(s.sql, s.params)));
}

/**
 * The transaction guard's refusal of one of the statements, as the handle refuses it: they are sent inside the
 * inbox's transaction (on SQL Server in the very batch that commits it), so a COMMIT among them must never go out.
 * The worker checks them first (src/worker/statements.ts); this keeps the store safe for any other caller.
 */
function refusal(
  dialect: Dialect,
  statements: readonly BoundStatement[],
): TransactionControlError | undefined {
  for (const statement of statements) {
    const refused = refusedStatement(statement.sql, dialect, "statements");
    if (refused !== undefined) return new TransactionControlError(refused);
  }
  return undefined;
}

/** One message: its marker and statements in one transaction, sent together. */
export async function processStatements(
  driver: StatementsDriver,
  key: InboxKey,
  statements: readonly BoundStatement[],
): Promise<ProcessOutcome> {
  const refused = refusal(driver.dialect, statements);
  if (refused !== undefined) return { kind: "failed", error: refused, errorClass: "permanent" };
  const requests = driver.statementRequests;
  if (requests !== undefined) {
    let composed: ComposedTransaction;
    try {
      composed = requests.compose(key.consumer, [key.messageId], [statements]);
    } catch (error) {
      return { kind: "failed", error, errorClass: "permanent" };
    }
    try {
      await sendComposed(driver, composed);
      return { kind: "committed" };
    } catch (error) {
      if (requests.markerExists(error)) return { kind: "duplicate" };
      noteFailedStatement(error, statementsText(statements));
      return failed(driver, error);
    }
  }
  let tx: Awaited<ReturnType<StatementsDriver["begin"]>>;
  try {
    tx = await driver.begin();
  } catch (error) {
    return failed(driver, error);
  }
  const [marker, ...rest] = await givenTogether(tx, [
    { sql: driver.statements.insertProcessedMarker, params: [messageKey(key.messageId), key.consumer] },
    ...statements,
  ]);
  await tx.rollback();
  if (marker!.status === "rejected") {
    const errorClass = driver.classify(marker!.reason, "marker");
    return errorClass === "duplicate"
      ? { kind: "duplicate" }
      : { kind: "failed", error: marker!.reason, errorClass };
  }
  // The first failure is the cause; those after it only report the aborted transaction (25P02, COMMIT's ROLLBACK).
  const at = rest.findIndex((r) => r.status === "rejected");
  if (at === -1) return { kind: "committed" };
  const reason: unknown = (rest[at] as PromiseRejectedResult).reason;
  // The last one is COMMIT's: a statement's own failure is named by its text.
  if (at < statements.length) noteFailedStatement(reason, statements[at]!.sql);
  return failed(driver, reason);
}

/**
 * A batch whose messages all have statements: the pre-check read (as the code path makes it), then one request
 * (or, on SQL Server past the parameter limit, several in one transaction) for the markers and every statement.
 * A marker that exists fails the request (it is not skipped), so no statement of a duplicate is ever applied:
 * then, as on any failure, the batch's undecided messages come back `single`.
 */
export async function processStatementsBatch(
  driver: StatementsDriver,
  consumer: string,
  items: readonly InboxBatchItem[],
  checks: (item: InboxBatchItem) => boolean,
): Promise<InboxBatchResult> {
  const batch = driver.batchStatements!;
  const outcomes: InboxBatchOutcome[] = items.map(() => SINGLE);
  const params = (ids: readonly string[]): unknown[] => markerParams(driver, consumer, ids);
  // Each goes alone, where the one with a refused statement fails and the others commit.
  const refused = refusal(
    driver.dialect,
    items.flatMap((i) => i.statements ?? []),
  );
  if (refused !== undefined) return { outcomes, failure: refused, reason: "handler_error" };
  const checked = await preCheckBatch(driver, consumer, items, checks, outcomes);
  if ("failure" in checked)
    return { outcomes, failure: checked.failure, reason: batchFailure(driver, checked.failure, "other") };
  if (checked.open.length === 0) return { outcomes, noTransaction: true };
  const open = checked.open;
  const undecided = (failure: unknown, why: BatchFailureReason): InboxBatchResult => ({
    outcomes: outcomes.map((o) => (o.kind === "duplicate" ? o : SINGLE)),
    failure,
    reason: batchFailure(driver, failure, why),
  });
  // The keys in one order, as the code path inserts them (no two batches take their key locks in other orders).
  const ids = open.map((i) => items[i]!.messageId).sort();
  const requests = driver.statementRequests;
  if (requests !== undefined) {
    try {
      await sendComposed(
        driver,
        requests.compose(
          consumer,
          ids,
          open.map((i) => items[i]!.statements ?? []),
        ),
      );
    } catch (failure) {
      return undecided(failure, requests.markerExists(failure) ? "duplicate" : "handler_error");
    }
  } else {
    let tx: Awaited<ReturnType<StatementsDriver["begin"]>>;
    try {
      tx = await driver.begin();
    } catch (failure) {
      return undecided(failure, "other");
    }
    const insert = (batch.insertMarkersOrFail ?? batch.insertMarkers)(ids.length);
    const [markers, ...rest] = await givenTogether(tx, [
      { sql: insert, params: params(ids) },
      ...open.flatMap((i) => items[i]!.statements ?? []),
    ]);
    await tx.rollback();
    if (markers!.status === "rejected") {
      const duplicate = driver.classify(markers!.reason, "marker") === "duplicate";
      return undecided(markers!.reason, duplicate ? "duplicate" : "other");
    }
    const first = rest.find((r) => r.status === "rejected");
    if (first !== undefined) {
      // The last one is COMMIT: alone, it failed the commit; after a statement's failure it only echoes it.
      return undecided(first.reason, first === rest[rest.length - 1] ? "other" : "handler_error");
    }
  }
  for (const i of open) outcomes[i] = COMMITTED;
  return { outcomes };
}

/**
 * Every statement and then COMMIT given to the transaction at once, so a pipelining connection writes them
 * together; settles when all have answered. After the first failure the server refuses the rest (the
 * transaction is aborted) and COMMIT answers ROLLBACK, which the transaction reports as a failure.
 */
async function givenTogether(
  tx: Awaited<ReturnType<StatementsDriver["begin"]>>,
  statements: readonly BoundStatement[],
): Promise<PromiseSettledResult<unknown>[]> {
  const sent: Promise<unknown>[] = statements.map((s) => tx.query(s.sql, s.params));
  sent.push(tx.commit());
  return Promise.allSettled(sent);
}

/** A composed transaction: one request that holds it whole, or its requests in a transaction opened here. */
async function sendComposed(driver: StatementsDriver, composed: ComposedTransaction): Promise<void> {
  if (composed.whole) {
    const [only] = composed.requests as [ComposedRequest];
    await driver.query(only.sql, only.params);
    return;
  }
  const tx = await driver.begin();
  try {
    for (const request of composed.requests) await tx.query(request.sql, request.params);
    await tx.commit();
  } catch (error) {
    await tx.rollback();
    throw error;
  }
}

const SINGLE: InboxBatchOutcome = { kind: "single" };
const COMMITTED: InboxBatchOutcome = { kind: "committed" };
