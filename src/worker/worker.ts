import type { Context } from "@opentelemetry/api";
import { HandlerRegistry, type IncomingMessage } from "../domain/envelope.ts";
import { within } from "../domain/within.ts";
import { QueueReceiver, type QueueReceiverOptions } from "../servicebus/receiver.ts";
import { SessionQueueReceiver } from "../servicebus/session-receiver.ts";
import { entityAnswer } from "../servicebus/entity-check.ts";
import { workerMetrics, type WorkerMetrics } from "../telemetry/metrics.ts";
import { silentLogger, type Logger } from "../telemetry/logger.ts";
import { errorType } from "../servicebus/tracing.ts";
import { Batcher, joinsWherePays, type BatchOutcome } from "./batcher.ts";
import { refuseSubscription } from "../domain/entity.ts";
import { createMessageLoop } from "./message-loop.ts";
import { defaultRetryPolicy } from "./retry-policy.ts";
import { ProgressMonitor } from "./progress.ts";
import { cleanupPass } from "./cleanup-pass.ts";
import { DEFAULT_CLEANUP_PACE } from "../inbox/cleanup-pace.ts";
import { OutagePause } from "./outage.ts";
import { ownRetryWarning, ThrottledPastDeadlineError } from "../servicebus/throttling.ts";
import { createLinkProbe } from "../servicebus/link-probe.ts";
import type { Readiness, Worker, WorkerOptions, WorkerStats } from "./worker-types.ts";

// The worker's settings, counters and readiness are declared in worker-types.ts; importers find them here too.
export type { Readiness, Worker, WorkerOptions, WorkerStats } from "./worker-types.ts";

/**
 * The worker: a peek-lock receiver whose every message goes through the inbox. On a database outage it stops
 * taking messages, probes the database with backoff, and resumes when it answers (OutagePause), so healthy
 * messages are not burned into the dead-letter queue by repeated abandons.
 */
export function createWorker(options: WorkerOptions): Worker {
  refuseSubscription(options.queue, "the worker");
  const logger = options.logger ?? silentLogger;
  const registry =
    options.handlers instanceof HandlerRegistry ? options.handlers : new HandlerRegistry(options.handlers);
  const store = options.store;
  const gracePeriodMs = options.gracePeriodMs ?? 20_000;
  const probeTimeoutMs = options.probeTimeoutMs ?? 2_000;
  const stats = emptyStats();
  const maxAutoLockRenewalMs = options.maxAutoLockRenewalMs ?? 300_000;
  const telemetry = workerMetrics();
  const batcher = createBatcher(options, (size, outcome) => telemetry.recordBatch(size, outcome));
  const benchOff = options.benchLayersOff ?? [];
  const progressOn = !benchOff.includes("progress");
  const progress = new ProgressMonitor({
    ...options.progress,
    probe: createLinkProbe(options.client, options.queue),
    logger,
    queue: options.queue,
  });

  let started = false;
  let stopping = false;
  const probeDatabase = () => probeWithin(store, probeTimeoutMs);
  const outage = new OutagePause({
    receiver: () => receiver,
    probe: probeDatabase,
    isStopping: () => stopping,
    logger,
    stats,
    telemetry,
    backoffMinMs: options.outageBackoffMinMs ?? 250,
    backoffMaxMs: options.outageBackoffMaxMs ?? 15_000,
    gracePeriodMs,
  });
  const loop = createMessageLoop({
    options,
    store,
    registry,
    logger,
    stats,
    telemetry,
    batcher,
    policy: options.retryPolicy ?? defaultRetryPolicy,
    maxAutoLockRenewalMs,
    isStopping: () => stopping,
    enterOutage: () => outage.enter(),
    recovery: () => outage.recovery,
  });
  const receiver = createReceiver(options, {
    client: options.client,
    queue: options.queue,
    maxConcurrentCalls: options.maxConcurrentCalls ?? DEFAULT_MAX_CONCURRENT_CALLS,
    maxAutoLockRenewalMs,
    lockDurationMs: options.lockDurationMs,
    logger,
    handle: (message: IncomingMessage, ctx: Context, held?: AbortSignal) => loop.handle(message, ctx, held),
    beforeSettle: options.beforeSettle,
    beforeComplete: options.beforeComplete,
    settlementGuard: !benchOff.includes("settlement-guard"),
    ...receiverHooks(options.queue, progressOn ? progress : undefined, stats, telemetry),
  });
  const chores = new Chores(logger, () => outage.paused);
  let stopObservingClaims: (() => void) | undefined;

  return {
    stats,
    get paused() {
      return outage.paused;
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
      const warning = ownRetryWarning(options.client);
      if (warning !== undefined) logger.warn(warning, { queue: options.queue });
      receiver.start();
      if (progressOn) progress.start();
      stopObservingClaims = telemetry.observeOpenClaims(() => store.countOpenClaims());
      scheduleChores(chores, options, logger);
      logger.info("worker started", {
        queue: options.queue,
        consumer: options.consumer,
        types: registry.types,
      });
    },
    async stop() {
      if (stopping) return;
      stopping = true;
      chores.stop();
      stopObservingClaims?.();
      loop.wakeRetryWaits();
      batcher?.flush();
      await outage.stop();
      await receiver.detach(gracePeriodMs);
      await progress.stop();
      stats.held = receiver.stats.held;
      logger.info("worker stopped", { ...stats });
    },
    readiness: () => readinessOf({ probeDatabase, receiver, progress, outage, isStopping: () => stopping }),
  };
}

/** Ready when the receive link is attached, the database answers, the link makes progress, and not stopping. */
async function readinessOf(parts: {
  readonly probeDatabase: () => Promise<void>;
  readonly receiver: QueueReceiver;
  readonly progress: ProgressMonitor;
  readonly outage: OutagePause;
  readonly isStopping: () => boolean;
}): Promise<Readiness> {
  const { receiver, progress, outage } = parts;
  let database: Readiness["database"] = "ok";
  try {
    await parts.probeDatabase();
  } catch {
    database = "unreachable";
  }
  const attached = receiver.attached;
  const serviceBus = progress.state;
  const stopping = parts.isStopping();
  return {
    ready: attached && database === "ok" && serviceBus === "ok" && !stopping,
    status: stopping ? "stopping" : outage.paused ? "paused" : "running",
    receiver: attached ? "attached" : "detached",
    database,
    serviceBus,
  };
}

function emptyStats(): WorkerStats {
  return {
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
}

/** One database probe, bounded: a database that does not answer within timeoutMs fails it. */
async function probeWithin(store: WorkerOptions["store"], timeoutMs: number): Promise<void> {
  if (!(await within(store.ping(), timeoutMs)))
    throw new Error(`database probe timed out after ${timeoutMs} ms`);
}

function createReceiver(options: WorkerOptions, receiverOptions: QueueReceiverOptions): QueueReceiver {
  const sessions = options.sessions;
  return sessions
    ? new SessionQueueReceiver({
        ...receiverOptions,
        maxSessions: sessions.maxSessions,
        sessionIdleMs: sessions.idleMs,
      })
    : new QueueReceiver(receiverOptions);
}

/**
 * What the receiver reports back: the link monitor hears of receives, and each settlement is counted. Without a
 * monitor (the bench's switch) it hears of nothing: one told of errors but not of deliveries would stay "refused".
 */
function receiverHooks(
  queue: string,
  progress: ProgressMonitor | undefined,
  stats: WorkerStats,
  telemetry: WorkerMetrics,
): Pick<QueueReceiverOptions, "onReceiveError" | "onReceived" | "onSettled"> {
  return {
    onReceiveError: (error, linkOpen) => progress?.receiveError(error, linkOpen),
    onReceived: () => {
      progress?.received();
      telemetry.recordConsumed(queue);
    },
    onSettled: (decision, result) => {
      progress?.settled(result);
      if (result.settled) stats.settled += 1;
      else stats.settlementFailures += 1;
      if (result.error instanceof ThrottledPastDeadlineError) stats.throttledToRedelivery += 1;
      telemetry.recordSettlement({
        queue,
        disposition: result.disposition,
        errorType: result.settled ? undefined : errorType(result.error),
      });
      telemetry.recordProcessed({
        queue,
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
}

/** The inbox's periodic chores: the two-phase claim sweep and retention cleanup. */
function scheduleChores(chores: Chores, options: WorkerOptions, logger: Logger): void {
  const store = options.store;
  const claimTimeoutMs = options.claimTimeoutMs ?? 300_000;
  chores.every(options.sweepIntervalMs ?? 60_000, "claim sweep", async () => {
    const swept = await store.sweepStaleClaims(claimTimeoutMs);
    if (swept > 0) logger.info("stale two-phase claims made retryable", { swept });
  });
  const retentionMs = options.retentionMs;
  if (retentionMs === undefined) return;
  chores.every(options.cleanupIntervalMs, "inbox cleanup", () =>
    cleanupPass(
      store,
      retentionMs,
      logger,
      {
        batchRows: options.cleanupBatchRows,
        pace: options.cleanupPace ?? DEFAULT_CLEANUP_PACE,
        pauseMs: options.cleanupPauseMs,
      },
      chores.stopped,
    ),
  );
}

/** Interval tasks that never overlap themselves and skip their turn while the database is paused. */
class Chores {
  private readonly timers: NodeJS.Timeout[] = [];
  // A retention pass, paused between its batches, can run for minutes: a stop ends it after its batch.
  private readonly stopController = new AbortController();

  private readonly logger: Logger;
  private readonly paused: () => boolean;

  constructor(logger: Logger, paused: () => boolean) {
    this.logger = logger;
    this.paused = paused;
  }

  every(intervalMs: number | undefined, name: string, task: () => Promise<unknown>): void {
    if (!intervalMs) return;
    let running = false;
    const timer = setInterval(() => {
      if (running || this.paused()) return;
      running = true;
      task()
        .catch((error: unknown) => this.logger.warn(`${name} failed`, { error }))
        .finally(() => (running = false));
    }, intervalMs);
    timer.unref();
    this.timers.push(timer);
  }

  /** Aborted on stop: a long chore ends after the step in hand. */
  get stopped(): AbortSignal {
    return this.stopController.signal;
  }

  stop(): void {
    this.stopController.abort();
    for (const timer of this.timers) clearInterval(timer);
  }
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
