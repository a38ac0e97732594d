import { context, ROOT_CONTEXT, type Context } from "@opentelemetry/api";
import { HandlerRegistry, type IncomingMessage } from "../domain/envelope.ts";
import { within } from "../domain/within.ts";
import { QueueReceiver, type QueueReceiverOptions } from "../servicebus/receiver.ts";
import { SessionQueueReceiver } from "../servicebus/session-receiver.ts";
import { entityAnswer } from "../servicebus/entity-check.ts";
import { workerMetrics } from "../telemetry/metrics.ts";
import { silentLogger } from "../telemetry/logger.ts";
import { errorType } from "../servicebus/tracing.ts";
import { Batcher, joinsWherePays, type BatchOutcome } from "./batcher.ts";
import { refuseSubscription } from "../domain/entity.ts";
import { createMessageLoop } from "./message-loop.ts";
import { defaultRetryPolicy } from "./retry-policy.ts";
import { ProgressMonitor } from "./progress.ts";
import { createLinkProbe } from "../servicebus/link-probe.ts";
import { ownRetryWarning, ThrottledPastDeadlineError } from "../servicebus/throttling.ts";
import type { Readiness, Worker, WorkerOptions, WorkerStats } from "./worker-types.ts";

// The worker's settings, counters and readiness are declared in worker-types.ts; importers find them here too.
export type { Readiness, Worker, WorkerOptions, WorkerStats } from "./worker-types.ts";

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
    throttledToRedelivery: 0,
    outages: 0,
    held: 0,
    retriesWaited: 0,
    retriesScheduled: 0,
    retriesExhausted: 0,
  };
  const policy = options.retryPolicy ?? defaultRetryPolicy;
  const maxAutoLockRenewalMs = options.maxAutoLockRenewalMs ?? 300_000;
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

  function warnUnlessOwnRetry(): void {
    const warning = ownRetryWarning(options.client);
    if (warning !== undefined) logger.warn(warning, { queue: options.queue });
  }

  const loop = createMessageLoop({
    options,
    store,
    registry,
    logger,
    stats,
    telemetry,
    batcher,
    policy,
    maxAutoLockRenewalMs,
    isStopping: () => stopping,
    enterOutage,
    recovery: () => recovery,
  });

  const receiverOptions: QueueReceiverOptions = {
    client: options.client,
    queue: options.queue,
    maxConcurrentCalls: options.maxConcurrentCalls ?? DEFAULT_MAX_CONCURRENT_CALLS,
    maxAutoLockRenewalMs,
    lockDurationMs: options.lockDurationMs,
    logger,
    handle: (message: IncomingMessage, ctx: Context, held?: AbortSignal) => loop.handle(message, ctx, held),
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
      if (result.error instanceof ThrottledPastDeadlineError) stats.throttledToRedelivery += 1;
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
        await probeDatabase();
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

  /** One database probe, bounded: a database that does not answer within probeTimeoutMs fails it. */
  async function probeDatabase(): Promise<void> {
    if (!(await within(store.ping(), probeTimeoutMs)))
      throw new Error(`database probe timed out after ${probeTimeoutMs} ms`);
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
    get mismatch() {
      return receiver.mismatch;
    },
    start() {
      if (started) return;
      started = true;
      warnUnlessOwnRetry();
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
      loop.wakeRetryWaits();
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
        await probeDatabase();
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
  const auto = (options.batchSize ?? "auto") === "auto";
  const size = auto ? autoBatchSize(options) : (options.batchSize as number);
  if (size <= 1 || options.store.processBatch === undefined) return undefined;
  return new Batcher({
    store: options.store,
    consumer: options.consumer,
    maxSize: size,
    ...(auto ? { joins: joinsWherePays(options.store) } : {}),
    logger: options.logger,
    waitMs: options.batchWaitMs ?? 0,
    maxInFlight: options.batchMaxInFlight,
    onBatch,
  });
}

/**
 * SBINBOX_BATCH_SIZE=auto's size: half of the messages in flight, so the next batch fills while one runs (the
 * setting docs/batching.md measured); below 4 in flight, no batches. In session mode a message of each session
 * held is in flight.
 */
export function autoBatchSize(options: Pick<WorkerOptions, "maxConcurrentCalls" | "sessions">): number {
  const inFlight =
    options.sessions?.maxSessions ?? options.maxConcurrentCalls ?? DEFAULT_MAX_CONCURRENT_CALLS;
  const half = Math.floor(inFlight / 2);
  return half < 2 ? 1 : Math.min(half, 1000);
}

const DEFAULT_MAX_CONCURRENT_CALLS = 16;
