import type { Context } from "@opentelemetry/api";
import { CopyProperty, type HandlerRegistry, type IncomingMessage } from "../domain/envelope.ts";
import type { Decision, FailureSource, ScheduledCopy } from "../domain/settlement.ts";
import { awaitsMigration } from "../inbox/statement-faults.ts";
import type { InboxStore } from "../inbox/store.ts";
import { retryMessageId } from "../servicebus/message-id.ts";
import { recordAttempt, recordRetryWait } from "../servicebus/tracing.ts";
import type { Logger } from "../telemetry/logger.ts";
import type { WorkerMetrics } from "../telemetry/metrics.ts";
import type { Batcher } from "./batcher.ts";
import { plainErrorHint } from "./plain-error-hint.ts";
import { firstAttempt, processMessage, releaseDeadLetteredClaim, type Attempt } from "./process-message.ts";
import { decideRetry, retryClass, type RetryPolicy, type RetryVerdict } from "./retry-policy.ts";
import type { WorkerOptions, WorkerStats } from "./worker-types.ts";

/** What the message loop is given by the worker around it: its parts, its counters, and its lifecycle's state. */
export interface MessageLoopContext {
  readonly options: WorkerOptions;
  readonly store: InboxStore;
  readonly registry: HandlerRegistry;
  readonly logger: Logger;
  readonly stats: WorkerStats;
  readonly telemetry: WorkerMetrics;
  readonly batcher: Batcher | undefined;
  readonly policy: RetryPolicy;
  readonly maxAutoLockRenewalMs: number;
  /** True once the worker has begun to stop. */
  isStopping(): boolean;
  /** Pauses receiving for a database outage (nothing when paused already or stopping). */
  enterOutage(): void;
  /** Settles with true when the current outage is over, false when the worker stops first. */
  recovery(): Promise<boolean>;
}

export interface MessageLoop {
  /** What becomes of one message: its attempts, retries in place and outage waits (the receiver's `handle`). */
  handle(
    message: IncomingMessage,
    ctx: Context,
    held?: AbortSignal,
  ): Promise<Decision & { messageType?: string; unsettled?: boolean }>;
  /** Wakes every in-place retry wait (the worker stops): each then schedules its retry instead. */
  wakeRetryWaits(): void;
}

/** What one delivery carries through its attempts, retries in place and outage waits. */
interface Delivery {
  readonly message: IncomingMessage;
  readonly ctx: Context;
  readonly held: AbortSignal | undefined;
  /** In session mode every line about the message names its session. */
  readonly log: Logger;
  readonly receivedAt: number;
  readonly attempt: Attempt;
  /** How long the latest attempt ran: a retry in place must fit under the lock again. */
  attemptMs: number;
  tried: boolean;
}

type LoopDecision = Decision & { messageType?: string; unsettled?: boolean };
/** A failed attempt the retry policy judges: an abandon for anything but an outage. */
type Failure = Extract<Decision, { disposition: "abandon" }> & { messageType?: string };
/** What follows a failed attempt: another attempt's decision, the final decision, or the message left unsettled. */
type AfterFailure = { readonly next: "again" | "done" | "unsettled"; readonly decision: LoopDecision };

/** The loop's context with the state it keeps across deliveries. */
interface LoopState {
  readonly loop: MessageLoopContext;
  /** The retry waits in progress, for wakeRetryWaits. */
  readonly waits: Set<() => void>;
  readonly hintPlainError: ReturnType<typeof plainErrorHint>;
}

/**
 * The worker's message loop: each message through the inbox, its failures retried in place under the lock or by a
 * scheduled copy, a message that met an outage waiting for the database (the lifecycle, worker.ts, pauses
 * receiving meanwhile). Each step is a function of its own below, given the loop's state.
 */
export function createMessageLoop(loop: MessageLoopContext): MessageLoop {
  const s: LoopState = { loop, waits: new Set(), hintPlainError: plainErrorHint(loop.logger) };
  return {
    handle: (message, ctx, held) => handle(s, message, ctx, held),
    wakeRetryWaits() {
      for (const wake of [...s.waits]) wake();
    },
  };
}

/** What becomes of one delivery: its first attempt, outage waits and retries, then its decision counted. */
async function handle(
  s: LoopState,
  message: IncomingMessage,
  ctx: Context,
  held?: AbortSignal,
): Promise<LoopDecision> {
  const d = newDelivery(s.loop.logger, message, ctx, held);
  let decision: LoopDecision = await attemptOnce(s, d);
  for (;;) {
    decision = await waitOutOutages(s, d, decision);
    if (s.loop.options.sessions && isOutage(decision) && (s.loop.isStopping() || held?.aborted)) {
      s.loop.stats.failed += 1;
      return { ...decision, unsettled: true }; // as a cut-short retry wait: no delivery spent
    }
    if (decision.disposition !== "abandon" || decision.errorClass === "unavailable") break;
    const after = await afterFailure(s, d, decision, decision.errorClass);
    decision = after.decision;
    if (after.next === "unsettled") return decision;
    if (after.next === "done") break;
  }
  return finish(s, d, decision);
}

function newDelivery(
  logger: Logger,
  message: IncomingMessage,
  ctx: Context,
  held: AbortSignal | undefined,
): Delivery {
  return {
    message,
    ctx,
    held,
    log: message.sessionId === undefined ? logger : logger.child({ sessionId: message.sessionId }),
    receivedAt: Date.now(),
    attempt: firstAttempt(),
    attemptMs: 0,
    tried: false,
  };
}

/** One attempt through the inbox; only a delivery's first attempt may join a batch. */
async function attemptOnce(s: LoopState, d: Delivery): Promise<LoopDecision> {
  const { options, store, registry, batcher } = s.loop;
  const started = Date.now();
  // A retry in place or after an outage goes alone, as without batches.
  const first = !d.tried;
  d.tried = true;
  const decided = await processMessage(
    d.message,
    {
      store,
      registry,
      consumer: options.consumer,
      maxMessageBytes: options.maxMessageBytes ?? 262_144,
      process: first && batcher ? (key, work, hint) => batcher.process(key, work, hint) : undefined,
    },
    d.attempt,
  );
  d.attemptMs = Date.now() - started;
  recordAttempt(d.ctx, d.attempt.attempt);
  return decided;
}

/**
 * A message that met an outage keeps its lock (renewed by the SDK) and waits for the database instead of being
 * abandoned: an abandon would spend one of its deliveries on every outage. Bounded, so a database that flaps
 * cannot hold it forever; after that, and on stop, it is abandoned as any other failure.
 */
async function waitOutOutages(s: LoopState, d: Delivery, decided: LoopDecision): Promise<LoopDecision> {
  const { loop } = s;
  let decision = decided;
  for (let retry = 0; retry < OUTAGE_RETRIES && isOutage(decision) && !loop.isStopping(); retry += 1) {
    loop.enterOutage();
    if (!(await loop.recovery())) break;
    decision = await attemptOnce(s, d);
  }
  return decision;
}

/** A failed attempt: dead-lettered, retried in place, left unsettled (sessions) or retried by a scheduled copy. */
async function afterFailure(
  s: LoopState,
  d: Delivery,
  decision: Failure,
  storeClass: "transient" | "permanent",
): Promise<AfterFailure> {
  const { loop } = s;
  const sessions = loop.options.sessions;
  const errorClass = retryClass(decision.error, storeClass);
  if (errorClass === "transient") s.hintPlainError(decision.messageType, decision.error);
  const verdict = judge(s, d, decision, errorClass);
  if (verdict.action === "dead_letter") {
    return { next: "done", decision: await giveUp(s, verdict, errorClass, d.attempt, decision.messageType) };
  }
  let delayMs = verdict.delayMs;
  // With sessions a scheduled copy would land behind the session's later messages: every retry waits in place,
  // the session held (and its lock renewed) meanwhile; the session's other messages wait behind it.
  if ((verdict.action === "wait" || sessions) && !loop.isStopping()) {
    const waited = await waitInPlace(s, d, decision, errorClass, verdict);
    if (waited === "done") return { next: "again", decision: await attemptOnce(s, d) };
    // Stopping: the rest of the wait becomes a scheduled copy, so the stop spends no delivery.
    delayMs = Math.max(0, delayMs - waited.elapsedMs);
  }
  if (sessions) return { next: "unsettled", decision: leaveUnsettled(s, d, decision, errorClass) };
  return { next: "done", decision: scheduleRetry(s, d, decision, errorClass, verdict.attempt, delayMs) };
}

/** The retry policy's verdict on a failed attempt, from its class, its attempt number and the lock left. */
function judge(
  s: LoopState,
  d: Delivery,
  decision: Failure,
  errorClass: "transient" | "permanent",
): RetryVerdict {
  const { store, policy } = s.loop;
  return decideRetry(policy, {
    attempt: d.attempt.attempt,
    errorClass,
    error: decision.error,
    awaitsMigration: errorClass === "permanent" && awaitsMigration(store.dialect, decision.error),
    ...(decision.source ? { source: decision.source } : {}),
    lockRemainingMs: lockRemaining(s, d.message, d.receivedAt),
    attemptDurationMs: d.attemptMs,
    random: Math.random(),
  });
}

/** Waits out a retry's delay under the lock; cut short when the worker stops or the session is given up. */
async function waitInPlace(
  s: LoopState,
  d: Delivery,
  decision: Failure,
  errorClass: "transient" | "permanent",
  verdict: Extract<RetryVerdict, { action: "wait" | "schedule" }>,
): Promise<"done" | { elapsedMs: number }> {
  const { options, stats, telemetry } = s.loop;
  const { message, attempt } = d;
  const delayMs = verdict.delayMs;
  d.log.info("attempt failed; retrying under the lock", {
    messageId: message.messageId,
    attempt: attempt.attempt,
    delayMs,
    errorClass,
    error: decision.error,
    ...sourceFields(decision.source),
  });
  options.onRetry?.(message, { attempt: attempt.attempt, delayMs, errorClass, error: decision.error });
  recordRetryWait(d.ctx, verdict.attempt, delayMs, decision.error);
  const began = Date.now();
  if (!(await pauseFor(delayMs, s.waits, s.loop.isStopping(), d.held)))
    return { elapsedMs: Date.now() - began };
  stats.retriesWaited += 1;
  telemetry.recordRetry(options.queue, "waited", errorClass);
  attempt.attempt = verdict.attempt;
  return "done";
}

/**
 * Stopping, or the session given up (its lock lost): the message is left unsettled. Closing the session returns
 * it at its session's head with its delivery count unchanged (an abandon would spend one); after a lost lock,
 * settling is no longer this worker's to do.
 */
function leaveUnsettled(
  s: LoopState,
  d: Delivery,
  decision: Failure,
  errorClass: "transient" | "permanent",
): LoopDecision {
  d.log.info("retry wait ended with the session given up; the message is left unsettled", {
    messageId: d.message.messageId,
    attempt: d.attempt.attempt,
    reason: d.held?.aborted ? "session given up" : "stopping",
  });
  s.loop.stats.failed += 1;
  return { ...decision, errorClass, unsettled: true };
}

/** A retry that does not fit under the lock (or the worker stops): a copy scheduled for later. */
function scheduleRetry(
  s: LoopState,
  d: Delivery,
  decision: Failure,
  errorClass: "transient" | "permanent",
  nextAttempt: number,
  delayMs: number,
): LoopDecision {
  const { options, stats, telemetry } = s.loop;
  stats.retriesScheduled += 1;
  telemetry.recordRetry(options.queue, "scheduled", errorClass);
  return {
    disposition: "reschedule",
    outcome: "failed",
    error: decision.error,
    errorClass,
    copy: scheduledCopy(d.attempt, nextAttempt, delayMs),
    messageType: decision.messageType,
    ...(decision.source ? { source: decision.source } : {}),
  };
}

/** The decision counted and logged; an outage it ended in pauses receiving. */
function finish(s: LoopState, d: Delivery, decision: LoopDecision): LoopDecision {
  s.loop.stats[decision.outcome] += 1;
  logDecision(d.log, d.message, decision);
  if (isOutage(decision)) s.loop.enterOutage();
  return decision;
}

/** No retry left, or none that can help: the message is dead-lettered, a two-phase claim it held released. */
async function giveUp(
  s: LoopState,
  verdict: Extract<RetryVerdict, { action: "dead_letter" }>,
  errorClass: "transient" | "permanent",
  attempt: Attempt,
  messageType: string | undefined,
): Promise<Decision & { messageType?: string }> {
  const { options, store, logger, stats, telemetry } = s.loop;
  stats.retriesExhausted += 1;
  telemetry.recordRetry(options.queue, "exhausted", errorClass);
  await releaseDeadLetteredClaim(store, options.consumer, attempt, (error) =>
    logger.warn("a dead-lettered message's claim could not be released; the sweeper frees it", { error }),
  );
  return {
    disposition: "dead_letter",
    outcome: "failed",
    reason: verdict.reason,
    description: verdict.description,
    ...(messageType !== undefined ? { messageType } : {}),
  };
}

/** How long this delivery's lock can still be held: while the SDK renews it, or until it expires. */
function lockRemaining(s: LoopState, message: IncomingMessage, receivedAt: number): number | undefined {
  // The session receiver renews the session's lock while it holds the session.
  if (s.loop.options.sessions) return Infinity;
  const { maxAutoLockRenewalMs } = s.loop;
  if (maxAutoLockRenewalMs > 0) return receivedAt + maxAutoLockRenewalMs - Date.now();
  return message.lockedUntil ? message.lockedUntil.getTime() - Date.now() : undefined;
}

/**
 * Resolves true after `ms`, or false at once when the worker stops (`stopping`, or a wake in `waits`, which the
 * wait adds itself to while it runs) or `held` fires (the session given up).
 */
function pauseFor(
  ms: number,
  waits: Set<() => void>,
  stopping: boolean,
  held?: AbortSignal,
): Promise<boolean> {
  if (stopping || held?.aborted) return Promise.resolve(false);
  return new Promise<boolean>((resolve) => {
    const wake = () => {
      clearTimeout(timer);
      waits.delete(wake);
      held?.removeEventListener("abort", wake);
      resolve(false);
    };
    const timer = setTimeout(() => {
      waits.delete(wake);
      held?.removeEventListener("abort", wake);
      resolve(true);
    }, ms);
    waits.add(wake);
    held?.addEventListener("abort", wake, { once: true });
  });
}

/** How many times a message that met an outage waits for the database and tries again before it is abandoned. */
const OUTAGE_RETRIES = 3;

/**
 * The copy for a retry that does not fit under the lock. Its MessageId is derived from the inbox key, the replay
 * number and the attempt, so scheduling the same retry twice is dropped by the broker's duplicate detection, while
 * each new attempt (and each replay's attempts) passes it.
 */
function scheduledCopy(attempt: Attempt, next: number, delayMs: number): ScheduledCopy {
  const state = attempt.state!;
  const properties: Record<string, string | number> = {
    [CopyProperty.originalKey]: state.inboxKey,
    [CopyProperty.attempt]: next,
    [CopyProperty.replay]: state.replay,
  };
  if (attempt.claimId !== undefined) properties[CopyProperty.claimId] = attempt.claimId;
  return {
    messageId: retryMessageId(state.inboxKey, state.replay, next),
    enqueueAt: new Date(Date.now() + delayMs),
    attempt: next,
    properties,
  };
}

/** The log line of what became of a message that was not applied: abandoned, a retry scheduled, dead-lettered. */
function logDecision(log: Logger, message: IncomingMessage, decision: Decision): void {
  if (decision.disposition === "abandon") {
    log.warn("message abandoned", {
      messageId: message.messageId,
      deliveryCount: message.deliveryCount,
      errorClass: decision.errorClass,
      error: decision.error,
      ...sourceFields(decision.source),
    });
  } else if (decision.disposition === "reschedule") {
    log.warn("attempt failed; retry scheduled", {
      messageId: message.messageId,
      attempt: decision.copy.attempt - 1,
      retryMessageId: decision.copy.messageId,
      enqueueAt: decision.copy.enqueueAt.toISOString(),
      errorClass: decision.errorClass,
      error: decision.error,
      ...sourceFields(decision.source),
    });
  } else if (decision.disposition === "dead_letter") {
    log.warn("message dead-lettered", {
      messageId: message.messageId,
      reason: decision.reason,
      description: decision.description,
    });
  }
}

/** A failure's handler and statement as fields of its log line. */
function sourceFields(source: FailureSource | undefined): { handler?: string; statement?: string } {
  if (source === undefined) return {};
  return source.statement === undefined
    ? { handler: source.handler }
    : { handler: source.handler, statement: source.statement };
}

function isOutage(decision: Decision): boolean {
  return decision.disposition === "abandon" && decision.errorClass === "unavailable";
}
