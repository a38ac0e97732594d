import {
  isServiceBusError,
  type ProcessErrorArgs,
  type ServiceBusReceivedMessage,
  type ServiceBusReceiver,
  type ServiceBusSender,
} from "@azure/service-bus";
import { context, type Context } from "@opentelemetry/api";
import type { Decision } from "../domain/settlement.ts";
import { copyOf } from "./copy.ts";
import { toIncoming } from "./incoming.ts";
import { createEntityReceiver } from "./entity-receiver.ts";
import { SettlementScheduler } from "./settlement.ts";
import { logSettlementFailure, SettlementGuard } from "./settlement-guard.ts";
import {
  endProcessSpan,
  errorType,
  startProcessSpan,
  traceRetryScheduled,
  traceSettlement,
} from "./tracing.ts";
import { within } from "../domain/within.ts";
import { recordThrottled } from "../telemetry/throttle-metrics.ts";
import { keepLock } from "./lock-keeper.ts";
import { byLockToken, isThrottled, retryWhileThrottled, ThrottledPastDeadlineError } from "./throttling.ts";
import { ConfigError } from "../domain/errors.ts";
import type { QueueReceiverOptions, ReceiverStats, Settlement } from "./receiver-options.ts";

// What a receiver is given and what it reports are declared in receiver-options.ts; importers find them here too.
export type { QueueReceiverOptions, ReceiverStats, Settlement } from "./receiver-options.ts";

/**
 * Service Bus's refusal of a plain receiver on a session entity, in today's words ("A non-sessionful message
 * receiver cannot be created on an entity that requires sessions") and the older ones.
 */
const NEEDS_SESSIONS = /non-sessionful message receiver/i;

/** The longest a stop waits for one link to close (see `closeWithin`). */
const CLOSE_LIMIT_MS = 5_000;

/**
 * A peek-lock subscription with explicit settlement. It can stop taking messages (pause, stop) without settling
 * what arrives meanwhile: such messages are held unsettled, their callbacks parked, so the SDK grants no new
 * credit, and closing the link hands them back to the broker with their delivery count spent at most once.
 */
export class QueueReceiver {
  protected readonly options: QueueReceiverOptions;
  private readonly scheduler: SettlementScheduler;
  private readonly guard: SettlementGuard;
  private receiver: ServiceBusReceiver | undefined;
  private sender: ServiceBusSender | undefined;
  private subscription: { close(): Promise<void> } | undefined;
  private accepting = false;
  private releaseHeld: (() => void) | undefined;
  private heldGate: Promise<void> | undefined;
  private readonly inFlight = new Set<Promise<unknown>>();
  readonly stats: ReceiverStats = {
    inFlight: 0,
    held: 0,
    settlementFailures: 0,
    receiveErrors: 0,
    throttledToRedelivery: 0,
  };

  constructor(options: QueueReceiverOptions) {
    this.options = options;
    this.scheduler = options.scheduler ?? new SettlementScheduler();
    this.guard = new SettlementGuard({
      logger: options.logger,
      lockDurationMs: options.lockDurationMs,
      onLateOutcome: (message, error) =>
        error === undefined
          ? options.logger.info(
              "a settlement given up on succeeded later: the message is settled after all",
              {
                messageId: message.messageId,
              },
            )
          : options.logger.debug("a settlement given up on failed later", {
              messageId: message.messageId,
              error,
            }),
    });
  }

  /** Settlements sent and not yet answered (each bounded by SettlementGuard). */
  get settling(): number {
    return this.guard.pending;
  }

  /** Set when the entity turns out to require sessions: the worker then stops taking messages, loudly. */
  mismatch: Error | undefined;

  /** The entity took the receive link (it is open): a receiver of the wrong kind would have been refused. */
  get entityAnswered(): boolean {
    return this.receiveLinkOpen === true;
  }

  /** True while a subscription is open and taking messages. */
  get attached(): boolean {
    return (
      this.mismatch === undefined &&
      this.accepting &&
      this.subscription !== undefined &&
      this.receiver?.isClosed === false
    );
  }

  /**
   * Whether the SDK's receive link is open (its internal `_streamingReceiver`, checked by
   * test/unit/sdk-internals.test.ts); undefined when this SDK does not have it where 7.9 does.
   */
  get receiveLinkOpen(): boolean | undefined {
    const streaming = (this.receiver as { _streamingReceiver?: { isOpen?: () => boolean } } | undefined)
      ?._streamingReceiver;
    return typeof streaming?.isOpen === "function" ? streaming.isOpen() : undefined;
  }

  /**
   * Whether a message's own lock is kept where the SDK's renewal gave up (keepLock); a session receiver's messages
   * are held by their session's lock instead.
   */
  protected get keepsMessageLocks(): boolean {
    return true;
  }

  /** Opens a new receive link and starts taking messages. */
  start(): void {
    if (this.subscription) return;
    const { client, queue, maxConcurrentCalls, maxAutoLockRenewalMs } = this.options;
    this.heldGate = new Promise<void>((resolve) => (this.releaseHeld = resolve));
    const receiver = createEntityReceiver(client, queue, {
      receiveMode: "peekLock",
      maxAutoLockRenewalDurationInMs: maxAutoLockRenewalMs,
      // The worker decodes the body itself, so size and encoding errors are its own to report.
      skipParsingBodyAsJson: true,
    });
    this.receiver = receiver;
    this.accepting = true;
    this.subscription = receiver.subscribe(
      {
        processMessage: (message) => this.onMessage(receiver, message),
        processError: (args) => this.onError(args),
      },
      { autoCompleteMessages: false, maxConcurrentCalls },
    );
  }

  /**
   * Stops taking messages, waits up to `waitMs` for those in flight to be decided and settled, then closes the
   * link. Messages held or still unfinished go back to the broker for redelivery.
   */
  async detach(waitMs: number): Promise<void> {
    const receiver = this.receiver;
    await this.pause();
    await this.drain(waitMs);
    this.receiver = undefined;
    this.releaseHeld?.();
    await this.closeWithin("the receive link", receiver?.close());
    const sender = this.sender;
    this.sender = undefined;
    await this.closeWithin("the retry sender", sender?.close());
  }

  /**
   * Stops taking messages but keeps the link: closing the subscription drains its credit, so nothing more is
   * delivered, while what is in flight keeps its lock (the SDK goes on renewing it) and can still be settled.
   */
  async pause(): Promise<void> {
    this.accepting = false;
    const subscription = this.subscription;
    this.subscription = undefined;
    await this.closeWithin("the subscription", subscription?.close());
  }

  /**
   * Waits for a close, at most CLOSE_LIMIT_MS. A stop that comes while the link of a resumed subscription is still
   * being set up (after an outage pause) made `subscription.close()` wait for the SDK's retry cycle, 60 s, in about
   * a third of the runs of test/integration/worker-handler-errors.test.ts; a close can also wait on a connection
   * gone quiet. Giving up is safe: what is unsettled comes back when its lock expires, and the inbox makes it a
   * duplicate; the connection's own close ends the link.
   */
  private async closeWithin(what: string, closing: Promise<void> | undefined): Promise<void> {
    if (closing === undefined) return;
    let failure: { error: unknown } | undefined;
    const closed = closing.catch((error: unknown) => void (failure = { error }));
    if (!(await within(closed, CLOSE_LIMIT_MS)))
      this.options.logger.warn(`closing ${what} took longer than ${CLOSE_LIMIT_MS} ms; going on without it`);
    else if (failure !== undefined) this.options.logger.warn(`closing ${what} failed`, failure);
  }

  /** Resolves when nothing is in flight, or after `waitMs`; true when everything finished. */
  async drain(waitMs: number): Promise<boolean> {
    const deadline = Date.now() + waitMs;
    while (this.inFlight.size > 0) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      await within(Promise.allSettled([...this.inFlight]), left);
    }
    return true;
  }

  private async onMessage(receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage): Promise<void> {
    if (!this.accepting || receiver !== this.receiver) {
      // Taken after a pause or stop began: leave it unsettled and park the callback until the link closes.
      this.stats.held += 1;
      await this.heldGate;
      return;
    }
    await this.run(receiver, message);
  }

  /**
   * Processes and settles one message, counted in flight meanwhile (a stop's drain waits for it). False when the
   * message was left unsettled (the handler's `unsettled`).
   */
  protected async run(
    receiver: ServiceBusReceiver,
    message: ServiceBusReceivedMessage,
    held?: AbortSignal,
  ): Promise<boolean> {
    const work = this.processOne(receiver, message, held);
    this.inFlight.add(work);
    this.stats.inFlight = this.inFlight.size;
    try {
      return await work;
    } finally {
      this.inFlight.delete(work);
      this.stats.inFlight = this.inFlight.size;
    }
  }

  private async processOne(
    receiver: ServiceBusReceiver,
    message: ServiceBusReceivedMessage,
    held: AbortSignal | undefined,
  ): Promise<boolean> {
    const began = performance.now();
    this.options.onReceived?.();
    const incoming = toIncoming(message);
    const { span, ctx } = startProcessSpan({
      queue: this.options.queue,
      messageId: incoming.messageId,
      correlationId: incoming.correlationId,
      deliveryCount: incoming.deliveryCount,
      sessionId: incoming.sessionId,
      applicationProperties: incoming.applicationProperties,
    });
    const stopKeeping = this.keepsMessageLocks
      ? keepLock(receiver, message, {
          lockDurationMs: this.options.lockDurationMs,
          maxAutoLockRenewalMs: this.options.maxAutoLockRenewalMs,
          entity: this.options.queue,
          logger: this.options.logger,
        })
      : () => {};
    try {
      return await this.decideAndSettle(receiver, message, incoming, span, ctx, began, held);
    } finally {
      stopKeeping();
    }
  }

  private async decideAndSettle(
    receiver: ServiceBusReceiver,
    message: ServiceBusReceivedMessage,
    incoming: ReturnType<typeof toIncoming>,
    span: ReturnType<typeof startProcessSpan>["span"],
    ctx: Context,
    began: number,
    held: AbortSignal | undefined,
  ): Promise<boolean> {
    let decision: Decision & { messageType?: string; unsettled?: boolean };
    try {
      // Inside the process span, so the inbox's spans and the handler's log lines belong to it.
      decision = await context.with(ctx, () => this.options.handle(incoming, ctx, held));
    } catch (error) {
      decision = { disposition: "abandon", outcome: "failed", error, errorClass: "permanent" };
    }
    if (decision.unsettled) {
      endProcessSpan(span, {
        outcome: decision.outcome,
        messageType: decision.messageType,
        errorType: "unsettled",
      });
      return false;
    }
    await this.options.beforeSettle?.(incoming, decision);
    // Also inside the span: a failed settlement's log line carries the message's trace and span ids.
    const settlement = await context.with(ctx, () => this.settle(receiver, message, decision, ctx, held));
    this.options.onSettled?.(decision, { ...settlement, durationMs: performance.now() - began });
    endProcessSpan(span, {
      outcome: decision.outcome,
      disposition: settlement.disposition,
      messageType: decision.messageType,
      reason: decision.disposition === "dead_letter" ? decision.reason : undefined,
      // Why it did not simply succeed: the failure, the poison reason, or a settlement that did not take effect.
      errorType:
        decision.disposition === "abandon" || decision.disposition === "reschedule"
          ? errorType(decision.error)
          : decision.disposition === "dead_letter"
            ? decision.reason
            : settlement.settled
              ? undefined
              : errorType(settlement.error),
    });
    return true;
  }

  /**
   * A retry that does not fit under the lock: schedule the copy, then complete. Not atomic, and need not be: a
   * crash between the two leaves both the copy and the original, both keyed by the original's inbox key, so
   * whichever is processed second finds the marker and is completed as a duplicate. A failed send abandons.
   */
  private async reschedule(
    receiver: ServiceBusReceiver,
    message: ServiceBusReceivedMessage,
    decision: Extract<Decision, { disposition: "reschedule" }>,
    ctx: Context,
    held: AbortSignal | undefined,
  ): Promise<Settlement> {
    const { copy } = decision;
    try {
      // The worker's own queue: on a topic its subscription forwards to it, so no other subscription sees the copy.
      this.sender ??= this.options.client.createSender(this.options.queue);
      const sender = this.sender;
      // A throttled schedule is tried again while the lock lasts: abandoning instead would spend a delivery. The
      // copy's MessageId is stable, so a try whose answer was lost is dropped by duplicate detection.
      await traceRetryScheduled(this.options.queue, ctx, copy, () =>
        retryWhileThrottled(
          (abortSignal) =>
            sender.scheduleMessages(
              copyOf(message, copy.messageId, copy.properties, copy.enqueueAt),
              copy.enqueueAt,
              { abortSignal },
            ),
          () => message.lockedUntilUtc?.getTime() ?? 0,
          { onThrottled: () => recordThrottled("schedule", this.options.queue) },
        ),
      );
    } catch (error) {
      this.options.logger.warn("scheduling a retry failed; the message is abandoned instead", {
        messageId: message.messageId,
        attempt: copy.attempt,
        code: isServiceBusError(error) ? error.code : undefined,
        error,
      });
      return this.settle(receiver, message, "abandon", ctx, held);
    }
    await this.options.beforeComplete?.(toIncoming(message), decision);
    return this.settle(receiver, message, "complete", ctx, held);
  }

  /** Settles through the scheduler; a failure is logged and counted, never thrown (the inbox absorbs it). */
  private async settle(
    receiver: ServiceBusReceiver,
    message: ServiceBusReceivedMessage,
    decisionOrDisposition: Decision | "complete" | "abandon",
    ctx: Context,
    held?: AbortSignal,
  ): Promise<Settlement> {
    const { queue } = this.options;
    const decision: Decision =
      typeof decisionOrDisposition === "string"
        ? decisionOrDisposition === "complete"
          ? { disposition: "complete", outcome: "committed" }
          : { disposition: "abandon", outcome: "failed", error: undefined, errorClass: "transient" }
        : decisionOrDisposition;
    if (decision.disposition === "reschedule") return this.reschedule(receiver, message, decision, ctx, held);
    const disposition = decision.disposition;
    const sdkSettle = (target: ServiceBusReceivedMessage): Promise<void> => {
      switch (decision.disposition) {
        case "complete":
          return receiver.completeMessage(target);
        case "abandon":
          return receiver.abandonMessage(target);
        case "dead_letter":
          return receiver.deadLetterMessage(target, {
            deadLetterReason: decision.reason,
            deadLetterErrorDescription: decision.description.slice(0, 1024),
          });
      }
    };
    const issue = (): Promise<void> =>
      this.options.settlementGuard === false
        ? sdkSettle(message)
        : this.guard.settle(message, () => sdkSettle(message), receiver);
    try {
      await traceSettlement(disposition, queue, ctx, async () => {
        try {
          await this.scheduler.settle(disposition, issue);
        } catch (error) {
          if (!isThrottled(error)) throw error;
          recordThrottled("settle", queue);
          await this.settleAgain(receiver, message, sdkSettle, error, held);
        }
      });
      return { settled: true, disposition };
    } catch (error) {
      this.stats.settlementFailures += 1;
      logSettlementFailure(this.options.logger, message, disposition, error);
      return { settled: false, error, disposition };
    }
  }

  /**
   * A settlement Service Bus throttled on the receive link: the delivery is settled (answered ServerBusy) while the
   * message keeps its lock, and the SDK cannot send another disposition for it ("already settled"). It is sent
   * again by lock token over `$management` (update-disposition: the SDK's path for a message without its link),
   * while the lock lasts (kept by keepLock), so the throttling spends no delivery. Each try is bounded by the lock
   * (retryWhileThrottled); at the lock's end the message is left to the broker, which redelivers it, counted in
   * `stats.throttledToRedelivery` and logged.
   */
  protected async settleAgain(
    _receiver: ServiceBusReceiver,
    message: ServiceBusReceivedMessage,
    sdkSettle: (target: ServiceBusReceivedMessage) => Promise<void>,
    first: unknown,
    _held: AbortSignal | undefined,
  ): Promise<void> {
    this.options.logger.debug("settlement throttled (ServerBusy): sent again by lock token", {
      messageId: message.messageId,
      error: first,
    });
    await this.whileLocked(
      message,
      () => sdkSettle(byLockToken(message)),
      () => message.lockedUntilUtc?.getTime() ?? 0,
      "its lock ended",
    );
  }

  /** Runs a throttled settlement's tries until `deadline`; past it, counts and logs the message as left. */
  protected async whileLocked(
    message: ServiceBusReceivedMessage,
    attempt: () => Promise<void>,
    deadline: () => number,
    ended: string,
  ): Promise<void> {
    try {
      await retryWhileThrottled(attempt, deadline, {
        onThrottled: () => recordThrottled("settle", this.options.queue),
      });
    } catch (error) {
      if (!(error instanceof ThrottledPastDeadlineError)) throw error;
      // The broker redelivers it; the inbox then completes it as a duplicate (its effect was committed).
      this.stats.throttledToRedelivery += 1;
      this.options.logger.warn(
        `settlement still throttled when ${ended}: the message is left to the broker's redelivery`,
        { messageId: message.messageId, sessionId: message.sessionId, refusals: error.refusals, error },
      );
      throw error;
    }
  }

  private onError(args: ProcessErrorArgs): Promise<void> {
    this.stats.receiveErrors += 1;
    // A throttled receive link (on Service Bus the link's error; the local broker only holds its deliveries back).
    if (isThrottled(args.error)) recordThrottled("receive", this.options.queue);
    if (args.errorSource === "receive") this.options.onReceiveError?.(args.error, () => this.receiveLinkOpen);
    const text = String((args.error as Error | undefined)?.message);
    if (NEEDS_SESSIONS.test(text)) {
      if (this.mismatch !== undefined) return Promise.resolve();
      // No retry can cure it: receiving stops, once and loudly, and readiness reports the receiver detached.
      this.mismatch = new ConfigError(
        "SBINBOX_MAX_CONCURRENT_SESSIONS",
        `0, but '${this.options.queue}' requires sessions (RequiresSession true): set it above 0 (${text})`,
      );
      this.options.logger.error("the entity requires sessions: receiving stopped", {
        queue: this.options.queue,
        error: this.mismatch,
      });
      void this.pause();
      return Promise.resolve();
    }
    this.options.logger.warn("receive error", {
      source: args.errorSource,
      code: isServiceBusError(args.error) ? args.error.code : undefined,
      error: args.error,
    });
    return Promise.resolve();
  }
}
