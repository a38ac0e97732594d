import type { HandlerRegistry, IncomingMessage } from "../domain/envelope.ts";
import type { MessageHandler } from "../domain/handler.ts";
import type { Decision } from "../domain/settlement.ts";
import type { CleanupPace } from "../inbox/cleanup-pace.ts";
import type { InboxStore } from "../inbox/store.ts";
import type { ServiceBusClient } from "../servicebus/client.ts";
import type { Logger } from "../telemetry/logger.ts";
import type { LinkState, ProgressOptions } from "./progress.ts";
import type { RetryPolicy } from "./retry-policy.ts";

// The worker's settings, counters and readiness, shared by its lifecycle (worker.ts) and its message loop
// (message-loop.ts).

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
  /**
   * Most messages per transaction (group commit, docs/batching.md); 1 is one per message. "auto", the default:
   * batches of half of maxConcurrentCalls for the messages batching pays for (handlers that declare keys, on a
   * store that runs them side by side or as statements handlers: joinsWherePays), the others one per message.
   */
  readonly batchSize?: number | "auto";
  /**
   * How long a batch's first message waits for more before the batch runs. 0, the default: no timer; a batch forms
   * from what arrives while batch transactions run (docs/batching.md, How a batch forms).
   */
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
  /** A fixed pause between retention batches instead of the pace (SBINBOX_CLEANUP_PAUSE_MS). */
  readonly cleanupPauseMs?: number;
  /** The retention pass's pace (default DEFAULT_CLEANUP_PACE), unless cleanupPauseMs is given. */
  readonly cleanupPace?: CleanupPace;
  /** Rows a retention batch reads by the key (SBINBOX_CLEANUP_BATCH_ROWS; the store's default when absent). */
  readonly cleanupBatchRows?: number;
  readonly outageBackoffMinMs?: number;
  readonly outageBackoffMaxMs?: number;
  /** Longest wait for one database probe (outage and readiness); a silent database fails the probe. */
  readonly probeTimeoutMs?: number;
  /** Which failures are retried, after how long, in place or by a scheduled copy (defaultRetryPolicy). */
  readonly retryPolicy?: RetryPolicy;
  readonly logger?: Logger;
  /** When the worker's connection counts as silent (src/worker/progress.ts; tests shorten it). */
  readonly progress?: ProgressOptions;
  /**
   * For the CPU benchmark's ledger only (SBINBOX_BENCH_LAYERS_OFF): the progress monitor not told of messages and
   * not started, settlements sent without the settlement guard's bound. Both take away a safety behaviour.
   */
  readonly benchLayersOff?: readonly ("progress" | "settlement-guard")[];
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
  /**
   * Of the settlement failures, those Service Bus throttled until the message's lock (or its session's link) ended:
   * the broker redelivers them, and the inbox completes them as duplicates.
   */
  throttledToRedelivery: number;
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
  /** Set once the entity has refused this worker's kind of receiver (at start-up or later): receiving has stopped. */
  readonly mismatch: Error | undefined;
}
