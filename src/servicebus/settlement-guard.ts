import {
  isServiceBusError,
  type ServiceBusReceivedMessage,
  type ServiceBusReceiver,
} from "@azure/service-bus";
import type { Logger } from "../telemetry/logger.ts";
import { recordRenewalStopMissing } from "../telemetry/renewal-stop-metrics.ts";
import type { Disposition } from "../telemetry/names.ts";

/** Why a settlement was given up on before the broker answered it. */
export type UnconfirmedReason = "connection-dropped" | "link-closed" | "lock-expired";

/** A settlement the worker stopped waiting for: it may or may not have reached the broker. */
export class SettlementUnconfirmedError extends Error {
  override readonly name = "SettlementUnconfirmedError";
  readonly code = "SettlementUnconfirmed";
  readonly reason: UnconfirmedReason;
  readonly waitedMs: number;
  readonly lockedUntil: Date | undefined;

  constructor(reason: UnconfirmedReason, waitedMs: number, lockedUntil: Date | undefined) {
    super(`settlement not confirmed: ${reason}`);
    this.reason = reason;
    this.waitedMs = waitedMs;
    this.lockedUntil = lockedUntil;
  }
}

/** What the guard reads of rhea's receiver link (the SDK's internal `message.delivery.link`). */
interface RheaLink {
  readonly name: string;
  is_open(): boolean;
  readonly connection: RheaEmitter & { is_open(): boolean };
  readonly session?: RheaEmitter;
}

interface RheaEmitter {
  on(event: string, listener: () => void): unknown;
  removeListener(event: string, listener: () => void): unknown;
}

interface Watchers {
  readonly listeners: Set<() => void>;
  readonly dispatch: () => void;
}

export interface SettlementGuardOptions {
  /** The least a settlement is waited for, even when the lock has (nearly) expired: a live broker answers in ms. */
  readonly minWaitMs?: number;
  /** The wait when the message carries no lock time. */
  readonly fallbackWaitMs?: number;
  /**
   * The entity's LockDuration: no lock lasts longer after its settlement stopped the renewal, so this bounds the
   * wait when the message's `lockedUntilUtc` (the broker's clock) reads later than it is on a skewed local clock.
   */
  readonly lockDurationMs?: number;
  /** The SDK's late answer to a settlement already given up on: undefined for a success, else its error. */
  readonly onLateOutcome?: (message: ServiceBusReceivedMessage, error: unknown) => void;
  /** Warned once when the SDK lacks the internal field the stale renewal stop needs. */
  readonly logger?: Logger;
}

/** A live broker answers a settlement in milliseconds; 5 s leaves room for a loaded event loop. */
const MIN_WAIT_MS = 5_000;
/** The SDK's own settlement time-out, for a message without `lockedUntilUtc`. */
const FALLBACK_WAIT_MS = 60_000;

/**
 * Bounds each settlement by what can still make it succeed. @azure/service-bus 7.9 waits 60 s for the answer to a
 * settlement and retries it three times 30 s apart (330 s), and after a connection drop each retry goes to the
 * receiver cached under the old link's name, open again on the new connection, which does not know the delivery:
 * none can succeed. This guard ends the wait when the delivery's link is gone (its connection dropped, or the link
 * closed, so the SDK opens a new one), and at the latest when the message's lock expires (after that the broker
 * would refuse it anyway). A settlement for a link already gone is still sent: while the SDK has not opened the
 * new link yet it settles by lock token over `$management`, which can succeed, so it gets `minWaitMs`; once the
 * new link is open it goes there and cannot. Sending it also matters because the SDK's settle call is what stops
 * its lock renewal for the message (a callback's end does not), and a lock renewed for
 * `maxAutoLockRenewalDurationInMs` would hold the redelivery back that long. The SDK's promise runs to its end in
 * the background; its late answer goes to `onLateOutcome`.
 *
 * The link is the SDK's internal `delivery.link` (rhea's), the only place that says which connection a message
 * came on; without it (another SDK version) only the lock bound applies.
 */
export class SettlementGuard {
  private readonly minWaitMs: number;
  private readonly fallbackWaitMs: number;
  private readonly lockDurationMs: number;
  private readonly onLateOutcome?: (message: ServiceBusReceivedMessage, error: unknown) => void;
  /** One listener per emitter and event, shared by every settlement waiting on it (16 at once would warn). */
  private readonly watchers = new Map<RheaEmitter, Map<string, Watchers>>();
  private waiting = 0;
  private readonly logger?: Logger;
  private warnedNoRenewer = false;

  constructor(options: SettlementGuardOptions = {}) {
    this.logger = options.logger;
    this.minWaitMs = options.minWaitMs ?? MIN_WAIT_MS;
    this.fallbackWaitMs = options.fallbackWaitMs ?? FALLBACK_WAIT_MS;
    this.lockDurationMs = options.lockDurationMs ?? Infinity;
    this.onLateOutcome = options.onLateOutcome;
  }

  /** Settlements sent and not yet answered or given up on. */
  get pending(): number {
    return this.waiting;
  }

  /**
   * Runs `issue` (the SDK's settle call) at once, synchronously, so the settlement scheduler's rounds stay whole,
   * and settles as it does, or rejects with SettlementUnconfirmedError when it can no longer succeed.
   */
  settle(
    message: ServiceBusReceivedMessage,
    issue: () => Promise<void>,
    receiver?: ServiceBusReceiver,
  ): Promise<void> {
    const began = Date.now();
    const lockedUntil = message.lockedUntilUtc;
    const link = deliveryLink(message);
    const settling = issue();
    const goneAtIssue = link !== undefined && !link.is_open();
    const waitMs = goneAtIssue
      ? this.minWaitMs
      : Math.max(
          this.minWaitMs,
          Math.min(this.lockDurationMs, lockedUntil ? lockedUntil.getTime() - began : this.fallbackWaitMs),
        );
    this.waiting += 1;
    return new Promise<void>((resolve, reject) => {
      let done = false;
      const unwatch: (() => void)[] = [];
      const finish = (then: () => void): void => {
        if (done) return;
        done = true;
        this.waiting -= 1;
        clearTimeout(timer);
        for (const stop of unwatch) stop();
        then();
      };
      const giveUp = (reason: UnconfirmedReason): void =>
        finish(() => {
          if (link && reason !== "lock-expired" && !stopStaleRenewal(receiver, message, link))
            this.noRenewer();
          reject(new SettlementUnconfirmedError(reason, Date.now() - began, lockedUntil));
        });
      const gone = (): UnconfirmedReason =>
        link?.connection.is_open() ? "link-closed" : "connection-dropped";
      const timer = setTimeout(() => giveUp(goneAtIssue ? gone() : "lock-expired"), waitMs);
      if (link && !goneAtIssue) {
        const closed = () => giveUp(gone());
        unwatch.push(this.watch(link.connection, "disconnected", () => giveUp("connection-dropped")));
        unwatch.push(this.watch(link as unknown as RheaEmitter, "receiver_close", closed));
        if (link.session) unwatch.push(this.watch(link.session, "session_close", closed));
      }
      settling.then(
        () => {
          if (done) this.onLateOutcome?.(message, undefined);
          finish(resolve);
        },
        (error: unknown) => {
          if (done) this.onLateOutcome?.(message, error);
          // The SDK's own error, passed through as it is (a ServiceBusError or an AggregateError of them).
          // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
          finish(() => reject(error));
        },
      );
    });
  }

  /** The SDK moved its lock renewer: redeliveries after a drop come only when the renewal ends (counted, warned once). */
  private noRenewer(): void {
    recordRenewalStopMissing();
    if (this.warnedNoRenewer) return;
    this.warnedNoRenewer = true;
    this.logger?.warn(
      "cannot stop the SDK's lock renewal for a message whose link is gone (its internal _lockRenewer is missing in " +
        "this @azure/service-bus version): such a message is redelivered only after SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS",
    );
  }

  private watch(emitter: RheaEmitter, event: string, listener: () => void): () => void {
    let events = this.watchers.get(emitter);
    if (!events) this.watchers.set(emitter, (events = new Map<string, Watchers>()));
    let group = events.get(event);
    if (!group) {
      const listeners = new Set<() => void>();
      group = { listeners, dispatch: () => [...listeners].forEach((fn) => fn()) };
      events.set(event, group);
      emitter.on(event, group.dispatch);
    }
    const { listeners, dispatch } = group;
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size > 0) return;
      emitter.removeListener(event, dispatch);
      events.delete(event);
      if (events.size === 0) this.watchers.delete(emitter);
    };
  }
}

/**
 * Stops the SDK's lock renewal for a message whose link is gone. @azure/service-bus 7.9 keys renewals by link name
 * and gives a link opened again after a drop a new name, so the settle call (which stops renewal under the current
 * name) leaves the old one running: the lock would be renewed for `maxAutoLockRenewalDurationInMs` (5 minutes here
 * by default) and the redelivery held back that long. Internal fields, read defensively: without them the
 * redelivery only comes later, and this returns false (test/unit/sdk-internals.test.ts checks the installed SDK).
 * A receiver without renewal (none passed, or renewal off) has nothing to stop.
 */
function stopStaleRenewal(
  receiver: ServiceBusReceiver | undefined,
  message: ServiceBusReceivedMessage,
  link: RheaLink,
): boolean {
  if (receiver === undefined) return true;
  const renewer = lockRenewerOf(receiver);
  if (renewer === null) return true;
  if (typeof renewer?.stop !== "function" || typeof link.name !== "string") return false;
  try {
    renewer.stop({ name: link.name, logPrefix: `[${link.name}]` }, message);
    return true;
  } catch {
    return false; // another SDK's internals: the lock then expires at the end of its renewal
  }
}

interface LockRenewer {
  stop?: (entity: object, message: object) => void;
}

/**
 * The SDK's lock renewer of a subscribed receiver (7.9: `_streamingReceiver._lockRenewer`); null when the receiver
 * is subscribed without renewal, undefined when the field is not where 7.9 has it.
 */
export function lockRenewerOf(receiver: ServiceBusReceiver): LockRenewer | null | undefined {
  const streaming = (receiver as { _streamingReceiver?: { _lockRenewer?: LockRenewer } })._streamingReceiver;
  if (streaming === undefined) return undefined;
  return "_lockRenewer" in streaming ? (streaming._lockRenewer ?? null) : undefined;
}

function deliveryLink(message: ServiceBusReceivedMessage): RheaLink | undefined {
  const link = (message as { delivery?: { link?: Partial<RheaLink> } }).delivery?.link;
  return typeof link?.is_open === "function" &&
    typeof link.connection?.on === "function" &&
    typeof link.connection.is_open === "function" &&
    typeof (link as Partial<RheaEmitter>).on === "function"
    ? (link as RheaLink)
    : undefined;
}

const WHAT_FOLLOWS: Record<Disposition, string> = {
  complete:
    "the broker redelivers it when its lock expires, and the inbox completes the redelivery as a duplicate",
  abandon: "the broker redelivers it when its lock expires, as the abandon would have",
  dead_letter: "the broker redelivers it when its lock expires, and it is decided (and dead-lettered) again",
};

const WHAT_HAPPENED: Record<UnconfirmedReason, string> = {
  "connection-dropped": "the connection the message came on dropped",
  "link-closed": "the link the message came on closed",
  "lock-expired": "no answer before the message's lock expired (a silent link)",
};

/**
 * The one line a failed settlement gets: what happened and what follows. The message is safe either way; an
 * AggregateError (the SDK's retries) is unwrapped so each attempt's name, code and message are in the line.
 */
export function logSettlementFailure(
  logger: Logger,
  message: ServiceBusReceivedMessage,
  disposition: Disposition,
  error: unknown,
): void {
  const messageId = message.messageId === undefined ? undefined : String(message.messageId);
  if (error instanceof SettlementUnconfirmedError) {
    const happened = `${disposition} not confirmed: ${WHAT_HAPPENED[error.reason]}; stopped waiting for it`;
    logger.warn(`${happened}; unless it took effect, ${WHAT_FOLLOWS[disposition]}`, {
      messageId,
      disposition,
      reason: error.reason,
      waitedMs: error.waitedMs,
      lockedUntil: error.lockedUntil?.toISOString(),
    });
    return;
  }
  logger.warn(`settlement failed; ${WHAT_FOLLOWS[disposition]}`, {
    messageId,
    disposition,
    code: settlementErrorCode(error),
    error,
    causes: causesOf(error),
  });
}

/** The error's Service Bus code, or for an AggregateError the last attempt's. */
export function settlementErrorCode(error: unknown): string | undefined {
  if (error instanceof AggregateError && error.errors.length > 0)
    return settlementErrorCode(error.errors[error.errors.length - 1]);
  return isServiceBusError(error) ? error.code : undefined;
}

/** An AggregateError's inner errors, by name, code and message (its own message is empty, it has no code). */
export function causesOf(error: unknown): { name: string; code?: string; message: string }[] | undefined {
  if (!(error instanceof AggregateError) || error.errors.length === 0) return undefined;
  return (error.errors as unknown[]).map((inner) => {
    const e = inner instanceof Error ? inner : new Error(String(inner));
    const code = (e as { code?: unknown }).code;
    return {
      name: e.name,
      code: typeof code === "string" || typeof code === "number" ? String(code) : undefined,
      message: e.message,
    };
  });
}
