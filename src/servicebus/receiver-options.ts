import type { ServiceBusClient } from "@azure/service-bus";
import type { Context } from "@opentelemetry/api";
import type { IncomingMessage } from "../domain/envelope.ts";
import type { Decision } from "../domain/settlement.ts";
import type { Logger } from "../telemetry/logger.ts";
import type { Disposition } from "../telemetry/names.ts";
import type { SettlementScheduler } from "./settlement.ts";

export interface QueueReceiverOptions {
  readonly client: ServiceBusClient;
  /** The entity path: a queue's name, or "<topic>/Subscriptions/<subscription>" (src/domain/entity.ts). */
  readonly queue: string;
  readonly maxConcurrentCalls: number;
  readonly maxAutoLockRenewalMs: number;
  /** The entity's LockDuration, which bounds each settlement's wait besides the message's lock time. */
  readonly lockDurationMs?: number;
  /**
   * Decides what becomes of one message; must not throw (a throw is treated as a failure: abandon). `held`, in
   * session mode, fires when the message's session is given up (lock lost, closed, detached); `unsettled` in the
   * answer then leaves the message unsettled: closing its session returns it without spending a delivery.
   */
  readonly handle: (
    message: IncomingMessage,
    ctx: Context,
    held?: AbortSignal,
  ) => Promise<Decision & { messageType?: string; unsettled?: boolean }>;
  readonly logger: Logger;
  readonly scheduler?: SettlementScheduler;
  /**
   * False sends each settlement without SettlementGuard's bound (the SDK then waits up to 330 s for one that cannot
   * succeed after a connection drop): for the CPU benchmark's ledger only. Default true.
   */
  readonly settlementGuard?: boolean;
  /** Awaited after the decision, before settlement (the demo's kill-between-commit-and-complete switch; tests). */
  readonly beforeSettle?: (message: IncomingMessage, decision: Decision) => void | Promise<void>;
  /** Awaited after a retry's copy is scheduled, before the original is completed (fault injection; tests). */
  readonly beforeComplete?: (message: IncomingMessage, decision: Decision) => void | Promise<void>;
  /** Each message taken for processing. */
  readonly onReceived?: () => void;
  /**
   * Each error the SDK reports for the receive link (processError with errorSource "receive"), with a function
   * that tells whether that link is open now.
   */
  readonly onReceiveError?: (error: unknown, linkOpen: () => boolean | undefined) => void;
  /** After settlement: the broker call made, whether it took effect, its error if not, the time since receipt. */
  readonly onSettled?: (decision: Decision, result: Settlement & { durationMs: number }) => void;
}

/** The settlement actually issued (a reschedule completes, or abandons when its copy cannot be sent). */
export interface Settlement {
  readonly settled: boolean;
  readonly error?: unknown;
  readonly disposition: Disposition;
}

export interface ReceiverStats {
  inFlight: number;
  held: number;
  settlementFailures: number;
  receiveErrors: number;
  /**
   * Messages whose settlement Service Bus throttled until their lock (or their session's link) ended: left to the
   * broker, which redelivers them (the inbox then completes them as duplicates).
   */
  throttledToRedelivery: number;
}
