import {
  decodeMessage,
  retryState,
  type HandlerRegistry,
  type IncomingMessage,
  type RetryState,
} from "../domain/envelope.ts";
import { PoisonMessageError } from "../domain/errors.ts";
import type { MessageContext } from "../domain/handler.ts";
import { messageKeys } from "../domain/keys.ts";
import type { ErrorClass, ProcessOutcome } from "../domain/outcome.ts";
import type { SqlExecutor } from "../domain/sql.ts";
import type { Decision, FailureSource } from "../domain/settlement.ts";
import { runStatements } from "../inbox/batch-statements.ts";
import { failedStatement, statementExcerpt } from "../inbox/failed-statement.ts";
import type { InboxKey, InboxStore, ProcessHint } from "../inbox/store.ts";
import { resolveStatements } from "./statements.ts";

export interface ProcessMessageDeps {
  readonly store: InboxStore;
  readonly registry: HandlerRegistry;
  readonly consumer: string;
  readonly maxMessageBytes: number;
  /** Runs a transactional handler's work in place of `store.process` (the batcher); same contract. */
  readonly process?: (
    key: InboxKey,
    work: (tx: SqlExecutor) => Promise<void>,
    hint?: ProcessHint,
  ) => Promise<ProcessOutcome>;
}

/**
 * An open two-phase claim this attempt did not take: another delivery of the message performing now (a redelivery
 * after a lost lock, a second worker), or one that died before marking it. Not an error of this message, so it is
 * retried later.
 */
export class ClaimBusyError extends Error {
  constructor(messageId: string) {
    super(
      `message ${messageId} has an open two-phase claim that another delivery of it took and has not marked ` +
        "processed (one performing now, or one that stopped before it finished, freed by the claim sweeper after " +
        "SBINBOX_CLAIM_TIMEOUT_MS)",
    );
    this.name = "ClaimBusyError";
  }
}

type Decided = Decision & { readonly messageType?: string };

/**
 * What one delivery carries from attempt to attempt while the worker retries it in place: the attempt number, and
 * for a two-phase handler the claim it holds and whether the external effect already succeeded.
 */
export interface Attempt {
  /** Read from the message on the first attempt; left undefined by the caller. */
  state?: RetryState;
  attempt: number;
  claimId?: string;
  performed?: boolean;
}

export function firstAttempt(): Attempt {
  return { attempt: 0 };
}

/**
 * Decides what becomes of one message, settlement following from the outcome alone:
 * poison -> dead-letter at once; committed or duplicate -> complete; anything else -> abandon.
 * It never throws.
 */
export async function processMessage(
  message: IncomingMessage,
  deps: ProcessMessageDeps,
  attempt: Attempt = firstAttempt(),
): Promise<Decided> {
  let decoded;
  try {
    if (message.messageId === "") {
      throw new PoisonMessageError(
        "UndecodableBody",
        "the message has no MessageId, so the inbox cannot key it",
      );
    }
    if (attempt.state === undefined) {
      attempt.state = retryState(message);
      attempt.attempt = attempt.state.attempt;
      attempt.claimId = attempt.state.claimId;
    }
    decoded = decodeMessage(message, deps.registry, deps.maxMessageBytes);
  } catch (error) {
    if (error instanceof PoisonMessageError) {
      return {
        disposition: "dead_letter",
        outcome: "poison",
        reason: error.reason,
        description: error.message,
      };
    }
    return failed(error, "permanent");
  }
  // A scheduled retry or a replayed copy is keyed by its original: the copy and the original never both take effect.
  const inboxKey = attempt.state.inboxKey;
  const key = { messageId: inboxKey, consumer: deps.consumer };
  const context: MessageContext = {
    messageId: inboxKey,
    attempt: attempt.attempt,
    consumer: deps.consumer,
    type: decoded.type,
    deliveryCount: message.deliveryCount,
    correlationId: message.correlationId,
    enqueuedTime: message.enqueuedTime,
    applicationProperties: message.applicationProperties,
    ...(message.sessionId !== undefined ? { sessionId: message.sessionId } : {}),
    ...(message.partitionKey !== undefined ? { partitionKey: message.partitionKey } : {}),
  };
  const { handler, body, type } = decoded;
  // Computed whether or not batches are on, so that a handler's faulty keys fail the same way either way.
  let keys: readonly string[] | undefined;
  if (handler.kind !== "two-phase") {
    try {
      keys = messageKeys(handler, body, context);
    } catch (error) {
      // An InvalidKeysError, a DoNotRetryError: dead-lettered at once as NotRetryable.
      return { ...failed(error, "permanent", sourceOf(type, error)), messageType: type };
    }
  }
  if (handler.kind === "transactional" || handler.kind === "statements") {
    let work: (tx: SqlExecutor) => Promise<void>;
    let hint: ProcessHint = {
      firstDelivery: isFirstDelivery(message, attempt),
      ...(keys !== undefined ? { keys } : {}),
    };
    if (handler.kind === "statements") {
      let statements;
      try {
        statements = resolveStatements(handler, body, context, deps.store.dialect);
      } catch (error) {
        // As a transactional handler's throw: "permanent" to the store, judged by the retry policy.
        return {
          ...failed(error, safeClassify(deps.store, error), sourceOf(type, error)),
          messageType: type,
        };
      }
      // The statements as data, for a store that sends them with the marker; `work` runs the same through the
      // handle, wherever the store takes that path (a batch mixed with code handlers).
      hint = { ...hint, statements };
      work = (tx) => runStatements(tx, statements);
    } else work = (tx) => handler.handle(body, tx, context);
    const outcome = await (deps.process
      ? deps.process(key, work, hint)
      : deps.store.process(key, work, hint));
    if (outcome.kind === "failed")
      return {
        ...failed(outcome.error, outcome.errorClass, sourceOf(type, outcome.error)),
        messageType: type,
      };
    return { disposition: "complete", outcome: outcome.kind, messageType: type };
  }
  // Two-phase: claim and commit, perform the external effect keyed by the MessageId, then mark it processed.
  // A retry re-enters the claim its earlier attempt took instead of finding it busy.
  const claim = await deps.store.claim(key, attempt.claimId);
  switch (claim.kind) {
    case "duplicate":
      return { disposition: "complete", outcome: "duplicate", messageType: type };
    case "busy":
      return { ...failed(new ClaimBusyError(inboxKey), "transient"), messageType: type };
    case "failed":
      return { ...failed(claim.error, claim.errorClass), messageType: type };
    case "claimed":
      break;
  }
  // A fresh claim means whatever an earlier attempt did under another claim no longer counts.
  if (claim.reentered !== true) attempt.performed = false;
  attempt.claimId = claim.claimId;
  if (!attempt.performed) {
    try {
      await handler.perform(body, { ...context, idempotencyKey: inboxKey });
      attempt.performed = true;
    } catch (error) {
      // The claim stays open and goes with the retry; the external system dedupes by the key. Like a
      // transactional handler's own error, it is "permanent" to the store and judged by the retry policy.
      return { ...failed(error, "permanent", sourceOf(type, error)), messageType: type };
    }
  }
  try {
    await deps.store.markProcessed(key, claim.claimId);
  } catch (error) {
    return { ...failed(error, safeClassify(deps.store, error)), messageType: type };
  }
  return { disposition: "complete", outcome: "committed", messageType: type };
}

/**
 * A message dead-lettered after its claim was taken gives the claim up, so `sbinbox dlq replay` claims afresh at
 * once instead of finding it busy until the sweeper frees it. The external effect may have happened: the replay
 * performs again with the same idempotency key, which is the contract of a two-phase handler anyway. Never throws:
 * a claim left open is freed by the sweeper.
 */
export async function releaseDeadLetteredClaim(
  store: InboxStore,
  consumer: string,
  attempt: Attempt,
  onError: (error: unknown) => void,
): Promise<void> {
  if (attempt.claimId === undefined || attempt.state === undefined) return;
  try {
    await store.releaseClaim({ messageId: attempt.state.inboxKey, consumer }, attempt.claimId);
    attempt.claimId = undefined;
  } catch (error) {
    onError(error);
  }
}

/**
 * The broker's first delivery of the message itself, on its first attempt here: not a redelivery, a retry in
 * place, a scheduled retry copy or a replay. Such a message's marker almost never exists (only a resend past the
 * duplicate-detection window has one), so the inbox's pre-check read is skipped for it by default.
 */
function isFirstDelivery(message: IncomingMessage, attempt: Attempt): boolean {
  const state = attempt.state!;
  return (
    message.deliveryCount === 0 &&
    attempt.attempt === 1 &&
    state.replay === 0 &&
    state.inboxKey === message.messageId
  );
}

function failed(
  error: unknown,
  errorClass: Exclude<ErrorClass, "duplicate">,
  source?: FailureSource,
): Decision {
  return { disposition: "abandon", outcome: "failed", error, errorClass, ...(source ? { source } : {}) };
}

/** The handler a failure is of, and the statement of its that the database refused, when one was. */
function sourceOf(type: string, error: unknown): FailureSource {
  const statement = failedStatement(error);
  return statement === undefined
    ? { handler: type }
    : { handler: type, statement: statementExcerpt(statement) };
}

function safeClassify(store: InboxStore, error: unknown): Exclude<ErrorClass, "duplicate"> {
  try {
    const c = store.classify(error);
    return c === "duplicate" ? "permanent" : c;
  } catch {
    return "permanent";
  }
}
