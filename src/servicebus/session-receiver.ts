import {
  isServiceBusError,
  type ServiceBusReceivedMessage,
  type ServiceBusReceiver,
  type ServiceBusSessionReceiver,
  type ServiceBusSessionReceiverOptions,
} from "@azure/service-bus";
import { parseEntity } from "../domain/entity.ts";
import { ConfigError } from "../domain/errors.ts";
import { within } from "../domain/within.ts";
import { recordThrottled } from "../telemetry/throttle-metrics.ts";
import { QueueReceiver, type QueueReceiverOptions } from "./receiver.ts";
import { byLockToken, isThrottled } from "./throttling.ts";

export interface SessionReceiverOptions extends QueueReceiverOptions {
  /** Most sessions held at once; each handles one message at a time, in order. */
  readonly maxSessions: number;
  /** How long a held session may stay empty before it is closed and the slot takes the next session. */
  readonly sessionIdleMs?: number;
}

/**
 * The error the broker gives a session receiver on an entity without sessions, in Service Bus's exact words (as
 * reported in danielgerlag/workflow-core#1217: "A sessionful message receiver cannot be created on an entity that
 * does not require sessions. Ensure RequiresSession is set to true ..."), which the local broker gives too. Exact,
 * so that no other error that merely mentions sessions is taken for a mismatch and stops the worker.
 */
const NOT_A_SESSION_ENTITY =
  /A sessionful message receiver cannot be created on an entity that does not require sessions/;

/**
 * The worker's receiver in session mode: `maxSessions` slots, each holding one session at a time (the next
 * available one, acceptNextSession) and taking its messages one by one: a message is received only after the
 * previous one is settled, so a session's messages are applied in their order, and a failure that waits holds its
 * session only. The session lock is renewed for as long as the session is held (a retry waiting in place may
 * outlast the SDK's own renewal window); a session left empty for `sessionIdleMs` is closed so that the slot serves
 * another one. Processing and settlement are QueueReceiver's.
 */
export class SessionQueueReceiver extends QueueReceiver {
  private readonly sessionOptions: SessionReceiverOptions;
  private running = false;
  /** The slots running, of this generation and of earlier ones still finishing a message. */
  private readonly loops = new Set<Promise<void>>();
  private readonly open = new Set<ServiceBusSessionReceiver>();
  /**
   * This start()'s slots: a detach and start (after a database outage) make a new generation, and the old one's
   * slots end as soon as what they are doing ends, so no more than `maxSessions` slots ever run at once.
   */
  private generation = newGeneration();
  /** A session was accepted, or the broker answered that none is free: the entity takes session receivers. */
  private answered = false;
  /** The last accept was taken (a session, or none free); false after a refused one, until one is taken again. */
  private taken = false;

  constructor(options: SessionReceiverOptions) {
    super(options);
    this.sessionOptions = options;
  }

  /** A session's messages are held by the session's lock, which this receiver renews, not by their own. */
  protected override get keepsMessageLocks(): boolean {
    return false;
  }

  override get entityAnswered(): boolean {
    return this.answered;
  }

  override get attached(): boolean {
    return this.running && this.mismatch === undefined;
  }

  /**
   * A session message's settlement throttled on its link. The SDK settles a session message only while its session's
   * link is open (settleMessageOperation refuses one whose link is gone: SessionLockLost, as the session lock went
   * with the link), and the throttled delivery is already settled on that link, so it is sent again the way the SDK
   * settles a deferred session message: by lock token over `$management`, with the session id, through this session
   * receiver. Only while the session is held: the tries stop when the session's link closes or the slot gives the
   * session up (`held`), and at the session lock's end (renewWhileHeld moves it). The message is then left to the
   * broker, which redelivers it with the session (counted in `stats.throttledToRedelivery`, logged).
   */
  protected override async settleAgain(
    receiver: ServiceBusReceiver,
    message: ServiceBusReceivedMessage,
    sdkSettle: (target: ServiceBusReceivedMessage) => Promise<void>,
    first: unknown,
    held: AbortSignal | undefined,
  ): Promise<void> {
    const session = receiver as ServiceBusSessionReceiver;
    const linkOpen = (): boolean => !session.isClosed && held?.aborted !== true;
    const deadline = (): number => (linkOpen() ? (session.sessionLockedUntilUtc?.getTime() ?? 0) : 0);
    this.options.logger.debug("session settlement throttled (ServerBusy): sent again by lock token", {
      messageId: message.messageId,
      sessionId: session.sessionId,
      error: first,
    });
    // retryWhileThrottled reads the deadline before each try: 0 once the link is gone, so no try goes out then.
    await this.whileLocked(
      message,
      () => sdkSettle(byLockToken(message)),
      deadline,
      "its session's link closed or its lock ended",
    );
  }

  override start(): void {
    if (this.running) return;
    this.running = true;
    const generation = newGeneration();
    this.generation = generation;
    this.fill(generation);
  }

  /**
   * Starts slots up to `maxSessions`, counting those of an earlier generation still busy (a handler that outlives
   * a detach): each that ends makes room for one of the current generation.
   */
  private fill(generation: Generation): void {
    while (
      generation === this.generation &&
      !generation.accepting.signal.aborted &&
      this.loops.size < this.sessionOptions.maxSessions
    ) {
      const loop: Promise<void> = this.slot(generation).finally(() => {
        this.loops.delete(loop);
        this.fill(this.generation);
      });
      this.loops.add(loop);
    }
  }

  /** Stops taking messages and sessions; a message being processed finishes and settles on its session. */
  override async pause(): Promise<void> {
    this.running = false;
    this.generation.accepting.abort();
    return Promise.resolve();
  }

  /**
   * Stops, and gives up every held session at once: a retry waiting in place ends and leaves its message unsettled
   * (closing the session returns it with its delivery count unchanged); a message being processed finishes.
   */
  override async detach(waitMs: number): Promise<void> {
    await this.pause();
    for (const held of this.generation.held) held.abort();
    await this.drain(waitMs);
    await within(Promise.allSettled([...this.loops]), 5_000);
    // A session still open (its slot did not finish in time) goes back at once, its unsettled message uncounted.
    await Promise.allSettled([...this.open].map((s) => s.close()));
    this.open.clear();
  }

  private async slot(generation: Generation): Promise<void> {
    const { logger } = this.options;
    const live = () => !generation.accepting.signal.aborted;
    while (live()) {
      let session: ServiceBusSessionReceiver;
      try {
        session = await this.accept(generation.accepting.signal);
        this.answered = this.taken = true;
      } catch (error) {
        if (!live()) return;
        if (isServiceBusError(error) && error.code === "ServiceTimeout") {
          this.answered = this.taken = true;
          continue; // no session came: ask again
        }
        if (error instanceof Error && NOT_A_SESSION_ENTITY.test(error.message)) {
          this.mismatch = new ConfigError(
            "SBINBOX_MAX_CONCURRENT_SESSIONS",
            `${this.sessionOptions.maxSessions}, but '${this.options.queue}' is not session-enabled (RequiresSession false): set it to 0 (${error.message})`,
          );
          logger.error("session mode on an entity without sessions: receiving stopped", {
            error: this.mismatch,
          });
          this.running = false;
          generation.accepting.abort();
          return;
        }
        // As a plain receiver's link errors: refused accepts with none taken since turn readiness to "refused"
        // (src/worker/progress.ts), and the next accept taken clears it.
        this.taken = false;
        this.options.onReceiveError?.(error, () => this.taken);
        logger.warn("accepting a session failed; trying again", {
          code: isServiceBusError(error) ? error.code : undefined,
          error,
        });
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        continue;
      }
      await this.hold(session, generation);
    }
  }

  private accept(abortSignal: AbortSignal): Promise<ServiceBusSessionReceiver> {
    const entity = parseEntity(this.options.queue);
    const options: ServiceBusSessionReceiverOptions = {
      receiveMode: "peekLock",
      // Renewed here for as long as the session is held, not for the SDK's fixed window.
      maxAutoLockRenewalDurationInMs: 0,
      skipParsingBodyAsJson: true,
      abortSignal,
    };
    const { client } = this.options;
    return entity.kind === "queue"
      ? client.acceptNextSession(entity.queue, options)
      : client.acceptNextSession(entity.topic, entity.subscription, options);
  }

  /**
   * One session: its messages one at a time, until it is idle, its lock is lost, or the receiver stops. The
   * message in process gets a signal that fires when the session is given up (its lock lost, the session closed, a
   * detach): a retry waiting in place then ends at once instead of retrying a message this slot no longer holds.
   */
  private async hold(session: ServiceBusSessionReceiver, generation: Generation): Promise<void> {
    const { logger } = this.options;
    const live = () => !generation.accepting.signal.aborted;
    const held = new AbortController();
    generation.held.add(held);
    this.open.add(session);
    const giveUp = (why: string, error?: unknown) => {
      if (held.signal.aborted) return;
      logger.warn(`session given up: ${why}`, { sessionId: session.sessionId, error });
      held.abort();
    };
    const stopRenewing = this.renewWhileHeld(session, held.signal, giveUp);
    try {
      while (live() && !held.signal.aborted) {
        const [message] = await session.receiveMessages(1, {
          maxWaitTimeInMs: this.sessionOptions.sessionIdleMs ?? 1_000,
        });
        if (!message) break;
        // Taken as the receiver stopped: left unsettled, it goes back uncounted when the session closes.
        if (!live() || held.signal.aborted) break;
        // Left unsettled (a retry wait cut short): the session must close before anything behind it is taken.
        if (!(await this.run(session, message, held.signal))) break;
        // A settlement throttled until the session's lock ended: the session is the broker's again, so nothing
        // more is taken on it here (the message left comes back with the session, first).
        if (Date.now() >= (session.sessionLockedUntilUtc?.getTime() ?? Infinity)) {
          giveUp("its lock ended while a settlement was throttled");
          break;
        }
      }
    } catch (error) {
      // A throttled receive on the session's link (Service Bus answers the link ServerBusy).
      if (isThrottled(error)) recordThrottled("receive", this.options.queue);
      logger.warn("session ended", {
        sessionId: session.sessionId,
        code: isServiceBusError(error) ? error.code : undefined,
        error,
      });
    } finally {
      stopRenewing();
      held.abort();
      generation.held.delete(held);
      this.open.delete(session);
      await session.close().catch(() => undefined);
    }
  }

  /**
   * Renews the session's lock until `held` fires, timed from the lock's length: the entity's LockDuration
   * (SBINBOX_QUEUE_LOCK_DURATION_MS) or, when shorter, what the broker granted at the accept. A renewal at a third of
   * that length, and after a failed one sooner (half the time left), so that a lock of a few seconds is renewed as
   * surely as one of minutes. The time left is counted on this clock from each renewal's start, which is never later
   * than the broker's own expiry. Returns what stops it.
   */
  private renewWhileHeld(
    session: ServiceBusSessionReceiver,
    held: AbortSignal,
    giveUp: (why: string, error?: unknown) => void,
  ): () => void {
    const acceptedAt = Date.now();
    const granted = (session.sessionLockedUntilUtc?.getTime() ?? 0) - acceptedAt;
    const lockMs = Math.max(
      100,
      Math.min(this.options.lockDurationMs ?? DEFAULT_LOCK_MS, granted > 0 ? granted : DEFAULT_LOCK_MS),
    );
    let expiresAt = acceptedAt + lockMs;
    let timer: NodeJS.Timeout | undefined;
    const later = (): void => {
      if (held.aborted) return;
      timer = setTimeout(renew, Math.max(20, Math.min(lockMs / 3, (expiresAt - Date.now()) / 2)));
    };
    const renew = (): void => {
      if (session.isClosed) return giveUp("its receiver closed");
      const startedAt = Date.now();
      session.renewSessionLock().then(
        () => {
          expiresAt = startedAt + lockMs;
          later();
        },
        (error: unknown) => {
          // Lost for certain, or not renewed before it ran out: another receiver may hold the session now.
          if (isServiceBusError(error) && error.code === "SessionLockLost") giveUp("its lock is lost", error);
          else if (Date.now() >= expiresAt) giveUp("its lock ran out before a renewal went through", error);
          else {
            this.options.logger.warn("renewing a session lock failed", {
              sessionId: session.sessionId,
              error,
            });
            later();
          }
        },
      );
    };
    later();
    return () => clearTimeout(timer);
  }
}

/** Service Bus's default LockDuration, for a receiver told no lock duration and given no expiry. */
const DEFAULT_LOCK_MS = 60_000;

interface Generation {
  /** Fired by pause and detach: the slots take no more sessions and messages. */
  readonly accepting: AbortController;
  /** One per held session, fired by detach. */
  readonly held: Set<AbortController>;
}

function newGeneration(): Generation {
  return { accepting: new AbortController(), held: new Set() };
}
