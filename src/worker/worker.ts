import { context, ROOT_CONTEXT, type Context } from "@opentelemetry/api";
import { HandlerRegistry, type IncomingMessage } from "../domain/envelope.ts";
import type { MessageHandler } from "../domain/handler.ts";
import type { Decision, ScheduledCopy } from "../domain/settlement.ts";
import type { InboxStore } from "../inbox/store.ts";
import type { ServiceBusClient } from "../servicebus/client.ts";
import { QueueReceiver, type QueueReceiverOptions } from "../servicebus/receiver.ts";
import { SessionQueueReceiver } from "../servicebus/session-receiver.ts";
import { entityAnswer } from "../servicebus/entity-check.ts";
import { workerMetrics } from "../telemetry/metrics.ts";
import { silentLogger, type Logger } from "../telemetry/logger.ts";
import { errorType, recordAttempt, recordRetryWait } from "../servicebus/tracing.ts";
import { retryMessageId } from "../servicebus/message-id.ts";
import { CopyProperty } from "../domain/envelope.ts";
import { Batcher, type BatchOutcome } from "./batcher.ts";
import { refuseSubscription } from "../domain/entity.ts";
import { firstAttempt, processMessage, releaseDeadLetteredClaim, type Attempt } from "./process-message.ts";
import { decideRetry, defaultRetryPolicy, retryClass, type RetryPolicy } from "./retry-policy.ts";
import { ProgressMonitor, type LinkState, type ProgressOptions } from "./progress.ts";
import { createLinkProbe } from "../servicebus/link-probe.ts";

export interface WorkerOptions {
  readonly client: ServiceBusClient;
  readonly store: InboxStore;
  readonly handlers: readonly MessageHandler[] | HandlerRegistry;
  /** The queue's name; on a topic, the service's own queue, which its subscription forwards to (docs/topics.md). */
  readonly queue: string;
  readonly consumer: string;
  readonly maxConcurrentCalls?: number;
  /**
   * Session mode (a session-enabled entity): up to `maxSessions` sessions at once, one message at a time each, in
   * order; a failed message's retries all wait with its session held (docs/failure-handling.md, Sessions).
   */
  readonly sessions?: { readonly maxSessions: number; readonly idleMs?: number };
  readonly maxAutoLockRenewalMs?: number;
  /** The entity's LockDuration: the longest a settlement is waited for, whatever the clocks say. */
  readonly lockDurationMs?: number;
  readonly maxMessageBytes?: number;
  /** Most messages per transaction (group commit, docs/batching.md); 1, the default, is one per message. */
  readonly batchSize?: number;
  /** How long a batch's first message waits for more before the batch runs. */
  readonly batchWaitMs?: number;
  /**
   * Most batch transactions at once (default DEFAULT_BATCH_MAX_IN_FLIGHT), assigned by key: no key in two at once,
   * and a batch holding an unkeyed message runs alone (docs/batching.md).
   */
  readonly batchMaxInFlight?: number;
  readonly gracePeriodMs?: number;
  readonly claimTimeoutMs?: number;
  readonly sweepIntervalMs?: number;
  readonly retentionMs?: number;
  readonly cleanupIntervalMs?: number;
  readonly outageBackoffMinMs?: number;
  readonly outageBackoffMaxMs?: number;
  /** Longest wait for one database probe (outage and readiness); a silent database fails the probe. */
  readonly probeTimeoutMs?: number;
  /** Which failures are retried, after how long, in place or by a scheduled copy (defaultRetryPolicy). */
  readonly retryPolicy?: RetryPolicy;
  readonly logger?: Logger;
  /** When the worker's connection counts as silent (src/worker/progress.ts; tests shorten it). */
  readonly progress?: ProgressOptions;
  /** Runs after a message's decision and before its settlement (fault injection; tests). */
  readonly beforeSettle?: (message: IncomingMessage, decision: Decision) => void | Promise<void>;
  /** Told of each retry in place before its wait (the test harness's outcomes), beside the log line. */
  readonly onRetry?: (
    message: IncomingMessage,
    retry: { attempt: number; delayMs: number; errorClass: string; error: unknown },
  ) => void;
  /** Runs after a retry's copy is scheduled and before the original is completed (fault injection; tests). */
  readonly beforeComplete?: (message: IncomingMessage, decision: Decision) => void | Promise<void>;
}

export interface WorkerStats {
  committed: number;
  duplicate: number;
  poison: number;
  failed: number;
  settled: number;
  settlementFailures: number;
  outages: number;
  held: number;
  /** Failed attempts retried in place, under the lock. */
  retriesWaited: number;
  /** Failed attempts retried by a scheduled copy. */
  retriesScheduled: number;
  /** Messages dead-lettered as RetriesExhausted or NotRetryable. */
  retriesExhausted: number;
}

/** What /readyz shows: states in one word each, no error text and no counters (those go to logs and metrics). */
export interface Readiness {
  readonly ready: boolean;
  readonly status: "running" | "paused" | "stopping";
  readonly receiver: "attached" | "detached";
  readonly database: "ok" | "unreachable";
  /** Whether the worker's connection to Service Bus is heard from ("ok") or has gone silent. */
  readonly serviceBus: LinkState;
}

export interface Worker {
  start(): void;
  /** Stops taking messages, finishes what is in flight within the grace period, settles, closes the link. */
  stop(): Promise<void>;
  readiness(): Promise<Readiness>;
  readonly stats: WorkerStats;
  /** True while receiving is paused for a database outage. */
  readonly paused: boolean;
  /** Messages being processed or settled now. */
  readonly inFlight: number;
  /** Settlements sent and not yet answered. */
  readonly settling: number;
  /** After start(): the entity's refusal of the receiver's kind (sessions or not), or undefined (entity-check.ts). */
  entityAnswer(ms: number): Promise<Error | undefined>;
}

/**
 * The worker: a peek-lock receiver whose every message goes through the inbox. On a database outage it stops
 * taking messages, probes the database with backoff, and resumes when it answers, so healthy messages are not
 * burned into the dead-letter queue by repeated abandons.
 */
export function createWorker(options: WorkerOptions): Worker {
  refuseSubscription(options.queue, "the worker");
  const logger = options.logger ?? silentLogger;
  const registry =
    options.handlers instanceof HandlerRegistry ? options.handlers : new HandlerRegistry(options.handlers);
  const store = options.store;
  const gracePeriodMs = options.gracePeriodMs ?? 20_000;
  const backoffMin = options.outageBackoffMinMs ?? 250;
  const backoffMax = options.outageBackoffMaxMs ?? 15_000;
  const probeTimeoutMs = options.probeTimeoutMs ?? 2_000;
  const stats: WorkerStats = {
    committed: 0,
    duplicate: 0,
    poison: 0,
    failed: 0,
    settled: 0,
    settlementFailures: 0,
    outages: 0,
    held: 0,
    retriesWaited: 0,
    retriesScheduled: 0,
    retriesExhausted: 0,
  };
  const policy = options.retryPolicy ?? defaultRetryPolicy;
  const maxAutoLockRenewalMs = options.maxAutoLockRenewalMs ?? 300_000;
  // Wakes every in-place retry wait when the worker stops: each then schedules its retry instead.
  const waits = new Set<() => void>();
  const telemetry = workerMetrics();
  let stopObservingClaims: (() => void) | undefined;
  const batcher = createBatcher(options, (size, outcome) => telemetry.recordBatch(size, outcome));

  let started = false;
  let stopping = false;
  let paused = false;
  let outageLoop: Promise<void> | undefined;
  let wakeOutage: (() => void) | undefined;
  // Settles with true when the current outage is over, false when the worker stops first.
  let recovery: Promise<boolean> = Promise.resolve(true);
  let endRecovery: (recovered: boolean) => void = () => undefined;
  const timers: NodeJS.Timeout[] = [];
  const progress = new ProgressMonitor({
    ...options.progress,
    probe: createLinkProbe(options.client, options.queue),
    logger,
    queue: options.queue,
  });

  const receiverOptions: QueueReceiverOptions = {
    client: options.client,
    queue: options.queue,
    maxConcurrentCalls: options.maxConcurrentCalls ?? 16,
    maxAutoLockRenewalMs,
    lockDurationMs: options.lockDurationMs,
    logger,
    handle: (message: IncomingMessage, ctx: Context, held?: AbortSignal) => handle(message, ctx, held),
    beforeSettle: options.beforeSettle,
    beforeComplete: options.beforeComplete,
    onReceiveError: (error, linkOpen) => progress.receiveError(error, linkOpen),
    onReceived: () => {
      progress.received();
      telemetry.recordConsumed(options.queue);
    },
    onSettled: (decision, result) => {
      progress.settled(result);
      if (result.settled) stats.settled += 1;
      else stats.settlementFailures += 1;
      telemetry.recordSettlement({
        queue: options.queue,
        disposition: result.disposition,
        errorType: result.settled ? undefined : errorType(result.error),
      });
      telemetry.recordProcessed({
        queue: options.queue,
        outcome: decision.outcome,
        durationMs: result.durationMs,
        errorType:
          decision.disposition === "dead_letter"
            ? decision.reason
            : decision.disposition === "abandon" || decision.disposition === "reschedule"
              ? decision.errorClass
              : undefined,
      });
    },
  };
  const sessions = options.sessions;
  const receiver = sessions
    ? new SessionQueueReceiver({
        ...receiverOptions,
        maxSessions: sessions.maxSessions,
        sessionIdleMs: sessions.idleMs,
      })
    : new QueueReceiver(receiverOptions);

  async function handle(
    message: IncomingMessage,
    ctx: Context,
    held?: AbortSignal,
  ): Promise<Decision & { messageType?: string; unsettled?: boolean }> {
    // In session mode every line about the message names its session.
    const log = message.sessionId === undefined ? logger : logger.child({ sessionId: message.sessionId });
    const receivedAt = Date.now();
    const attempt = firstAttempt();
    /** How long the latest attempt ran: a retry in place must fit under the lock again. */
    let attemptMs = 0;
    let tried = false;
    const decide = async () => {
      const started = Date.now();
      // Only a delivery's first attempt joins a batch: a retry in place or after an outage goes alone, as today.
      const first = !tried;
      tried = true;
      const decided = await processMessage(
        message,
        {
          store,
          registry,
          consumer: options.consumer,
          maxMessageBytes: options.maxMessageBytes ?? 262_144,
          process: first && batcher ? (key, work, hint) => batcher.process(key, work, hint) : undefined,
        },
        attempt,
      );
      attemptMs = Date.now() - started;
      recordAttempt(ctx, attempt.attempt);
      return decided;
    };
    let decision = await decide();
    for (;;) {
      // A message that met an outage keeps its lock (renewed by the SDK) and waits for the database instead of
      // being abandoned: an abandon would spend one of its deliveries on every outage. Bounded, so a database that
      // flaps cannot hold it forever; after that, and on stop, it is abandoned as any other failure.
      for (let retry = 0; retry < OUTAGE_RETRIES && isOutage(decision) && !stopping; retry += 1) {
        enterOutage();
        if (!(await recovery)) break;
        decision = await decide();
      }
      if (sessions && isOutage(decision) && (stopping || held?.aborted)) {
        stats.failed += 1;
        return { ...decision, unsettled: true }; // as a cut-short retry wait below: no delivery spent
      }
      if (decision.disposition !== "abandon" || decision.errorClass === "unavailable") break;
      const errorClass = retryClass(decision.error, decision.errorClass);
      const verdict = decideRetry(policy, {
        attempt: attempt.attempt,
        errorClass,
        error: decision.error,
        lockRemainingMs: lockRemaining(message, receivedAt),
        attemptDurationMs: attemptMs,
        random: Math.random(),
      });
      if (verdict.action === "dead_letter") {
        stats.retriesExhausted += 1;
        telemetry.recordRetry(options.queue, "exhausted", errorClass);
        await releaseDeadLetteredClaim(store, options.consumer, attempt, (error) =>
          logger.warn("a dead-lettered message's claim could not be released; the sweeper frees it", {
            error,
          }),
        );
        decision = {
          disposition: "dead_letter",
          outcome: "failed",
          reason: verdict.reason,
          description: verdict.description,
          messageType: decision.messageType,
        };
        break;
      }
      let delayMs = verdict.delayMs;
      // With sessions a scheduled copy would land behind the session's later messages: every retry waits in place,
      // the session held (and its lock renewed) meanwhile; the session's other messages wait behind it.
      if ((verdict.action === "wait" || sessions) && !stopping) {
        log.info("attempt failed; retrying under the lock", {
          messageId: message.messageId,
          attempt: attempt.attempt,
          delayMs,
          errorClass,
          error: decision.error,
        });
        options.onRetry?.(message, { attempt: attempt.attempt, delayMs, errorClass, error: decision.error });
        recordRetryWait(ctx, verdict.attempt, delayMs, decision.error);
        const began = Date.now();
        if (await pause(delayMs, held)) {
          stats.retriesWaited += 1;
          telemetry.recordRetry(options.queue, "waited", errorClass);
          attempt.attempt = verdict.attempt;
          decision = await decide();
          continue;
        }
        // Stopping: the rest of the wait becomes a scheduled copy, so the stop spends no delivery.
        delayMs = Math.max(0, delayMs - (Date.now() - began));
      }
      if (sessions) {
        // Stopping, or the session given up (its lock lost): the message is left unsettled. Closing the session
        // returns it at its session's head with its delivery count unchanged (an abandon would spend one); after a
        // lost lock, settling is no longer this worker's to do.
        log.info("retry wait ended with the session given up; the message is left unsettled", {
          messageId: message.messageId,
          attempt: attempt.attempt,
          reason: held?.aborted ? "session given up" : "stopping",
        });
        stats.failed += 1;
        return { ...decision, errorClass, unsettled: true };
      }
      stats.retriesScheduled += 1;
      telemetry.recordRetry(options.queue, "scheduled", errorClass);
      decision = {
        disposition: "reschedule",
        outcome: "failed",
        error: decision.error,
        errorClass,
        copy: scheduledCopy(attempt, verdict.attempt, delayMs),
        messageType: decision.messageType,
      };
      break;
    }
    stats[decision.outcome] += 1;
    if (decision.disposition === "abandon") {
      log.warn("message abandoned", {
        messageId: message.messageId,
        deliveryCount: message.deliveryCount,
        errorClass: decision.errorClass,
        error: decision.error,
      });
      if (isOutage(decision)) enterOutage();
    } else if (decision.disposition === "reschedule") {
      log.warn("attempt failed; retry scheduled", {
        messageId: message.messageId,
        attempt: decision.copy.attempt - 1,
        retryMessageId: decision.copy.messageId,
        enqueueAt: decision.copy.enqueueAt.toISOString(),
        errorClass: decision.errorClass,
        error: decision.error,
      });
    } else if (decision.disposition === "dead_letter") {
      log.warn("message dead-lettered", {
        messageId: message.messageId,
        reason: decision.reason,
        description: decision.description,
      });
    }
    return decision;
  }

  /** How long this delivery's lock can still be held: while the SDK renews it, or until it expires. */
  function lockRemaining(message: IncomingMessage, receivedAt: number): number | undefined {
    if (sessions) return Infinity; // the session receiver renews the session's lock while it holds the session
    if (maxAutoLockRenewalMs > 0) return receivedAt + maxAutoLockRenewalMs - Date.now();
    return message.lockedUntil ? message.lockedUntil.getTime() - Date.now() : undefined;
  }

  /** Resolves true after `ms`, or false at once when the worker stops or `held` fires (the session given up). */
  function pause(ms: number, held?: AbortSignal): Promise<boolean> {
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

  function enterOutage(): void {
    if (paused || stopping) return;
    paused = true;
    recovery = new Promise<boolean>((resolve) => (endRecovery = resolve));
    stats.outages += 1;
    logger.warn("database unreachable: receiving paused until it answers");
    // Outside the message's span that noticed the outage: the pause outlives it, and its probes are their own.
    outageLoop = context
      .with(ROOT_CONTEXT, () => runOutage())
      .catch((error: unknown) => logger.error("outage loop failed", { error }));
  }

  async function runOutage(): Promise<void> {
    const began = Date.now();
    // Stop taking messages; the link stays, so messages waiting for the database keep their locks.
    await receiver.pause();
    let wait = backoffMin;
    while (!stopping) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, wait);
        wakeOutage = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wakeOutage = undefined;
      if (stopping) break;
      try {
        await withTimeout(store.ping(), probeTimeoutMs);
        break;
      } catch (error) {
        logger.info("database still unreachable", { nextProbeMs: Math.min(wait * 2, backoffMax), error });
        wait = Math.min(wait * 2, backoffMax);
      }
    }
    endRecovery(!stopping);
    if (stopping) return;
    // The waiting messages retry and settle on the old link; then it closes and a new subscription starts.
    await receiver.detach(gracePeriodMs);
    telemetry.recordOutagePause(Date.now() - began);
    logger.info("database answers again: receiving resumed", { pausedMs: Date.now() - began });
    paused = false;
    if (!stopping) receiver.start();
  }

  function every(intervalMs: number | undefined, name: string, task: () => Promise<unknown>): void {
    if (!intervalMs) return;
    let running = false;
    const timer = setInterval(() => {
      if (running || paused) return;
      running = true;
      task()
        .catch((error: unknown) => logger.warn(`${name} failed`, { error }))
        .finally(() => (running = false));
    }, intervalMs);
    timer.unref();
    timers.push(timer);
  }

  return {
    stats,
    get paused() {
      return paused;
    },
    get inFlight() {
      return receiver.stats.inFlight;
    },
    get settling() {
      return receiver.settling;
    },
    entityAnswer: (ms) => entityAnswer(receiver, ms),
    start() {
      if (started) return;
      started = true;
      receiver.start();
      progress.start();
      stopObservingClaims = telemetry.observeOpenClaims(() => store.countOpenClaims());
      const claimTimeoutMs = options.claimTimeoutMs ?? 300_000;
      every(options.sweepIntervalMs ?? 60_000, "claim sweep", async () => {
        const swept = await store.sweepStaleClaims(claimTimeoutMs);
        if (swept > 0) logger.info("stale two-phase claims made retryable", { swept });
      });
      const retentionMs = options.retentionMs;
      if (retentionMs !== undefined) {
        every(options.cleanupIntervalMs, "inbox cleanup", async () => {
          const deleted = await store.cleanup(retentionMs);
          if (deleted > 0) logger.info("old inbox rows deleted", { deleted });
        });
      }
      logger.info("worker started", {
        queue: options.queue,
        consumer: options.consumer,
        types: registry.types,
      });
    },
    async stop() {
      if (stopping) return;
      stopping = true;
      for (const timer of timers) clearInterval(timer);
      stopObservingClaims?.();
      for (const wake of [...waits]) wake();
      batcher?.flush();
      wakeOutage?.();
      await outageLoop;
      await receiver.detach(gracePeriodMs);
      await progress.stop();
      stats.held = receiver.stats.held;
      logger.info("worker stopped", { ...stats });
    },
    async readiness() {
      let database: Readiness["database"] = "ok";
      try {
        await withTimeout(store.ping(), probeTimeoutMs);
      } catch {
        database = "unreachable";
      }
      const attached = receiver.attached;
      const serviceBus = progress.state;
      return {
        ready: attached && database === "ok" && serviceBus === "ok" && !stopping,
        status: stopping ? "stopping" : paused ? "paused" : "running",
        receiver: attached ? "attached" : "detached",
        database,
        serviceBus,
      };
    },
  };
}

/** The batcher when batches are on (batchSize above 1 and a store that can run them). */
function createBatcher(
  options: WorkerOptions,
  onBatch: (size: number, outcome: BatchOutcome) => void,
): Batcher | undefined {
  const size = options.batchSize ?? 1;
  if (size <= 1 || options.store.processBatch === undefined) return undefined;
  return new Batcher({
    store: options.store,
    consumer: options.consumer,
    maxSize: size,
    waitMs: options.batchWaitMs ?? 2,
    maxInFlight: options.batchMaxInFlight,
    onBatch,
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

function isOutage(decision: Decision): boolean {
  return decision.disposition === "abandon" && decision.errorClass === "unavailable";
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<T>(
      (_, reject) =>
        (timer = setTimeout(() => reject(new Error(`database probe timed out after ${ms} ms`)), ms)),
    ),
  ]).finally(() => clearTimeout(timer));
}
