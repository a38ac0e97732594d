import {
  isServiceBusError,
  type ServiceBusSessionReceiver,
  type ServiceBusSessionReceiverOptions,
} from "@azure/service-bus";
import { parseEntity } from "../domain/entity.ts";
import { QueueReceiver, type QueueReceiverOptions } from "./receiver.ts";

export interface SessionReceiverOptions extends QueueReceiverOptions {
  /** Most sessions held at once; each handles one message at a time, in order. */
  readonly maxSessions: number;
  /** How long a held session may stay empty before it is closed and the slot takes the next session. */
  readonly sessionIdleMs?: number;
}

/** The error the broker gives a session receiver on an entity without sessions (Service Bus's words). */
const NOT_A_SESSION_ENTITY = /does not require sessions|not.*session.*enabled|non-session/i;

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
  private loops: Promise<void>[] = [];
  private readonly open = new Set<ServiceBusSessionReceiver>();
  private abort = new AbortController();
  /** Set when the entity turns out not to be session-enabled: the worker then stops taking messages, loudly. */
  mismatch: Error | undefined;

  constructor(options: SessionReceiverOptions) {
    super(options);
    this.sessionOptions = options;
  }

  override get attached(): boolean {
    return this.running && this.mismatch === undefined;
  }

  override start(): void {
    if (this.running) return;
    this.running = true;
    this.abort = new AbortController();
    this.loops = Array.from({ length: this.sessionOptions.maxSessions }, () => this.slot());
  }

  /** Stops taking messages and sessions; a message being processed finishes and settles on its session. */
  override async pause(): Promise<void> {
    this.running = false;
    this.abort.abort();
    return Promise.resolve();
  }

  override async detach(waitMs: number): Promise<void> {
    await this.pause();
    await this.drain(waitMs);
    await Promise.race([
      Promise.allSettled(this.loops),
      new Promise((resolve) => setTimeout(resolve, 5_000)),
    ]);
    // A session still open (its slot did not finish in time) goes back at once, its unsettled message uncounted.
    await Promise.allSettled([...this.open].map((s) => s.close()));
    this.open.clear();
  }

  private async slot(): Promise<void> {
    const { logger } = this.options;
    while (this.running) {
      let session: ServiceBusSessionReceiver;
      try {
        session = await this.accept();
      } catch (error) {
        if (!this.running) return;
        if (isServiceBusError(error) && error.code === "ServiceTimeout") continue; // no session came: ask again
        if (error instanceof Error && NOT_A_SESSION_ENTITY.test(error.message)) {
          this.mismatch = new Error(
            `SBINBOX_SESSIONS is on but '${this.options.queue}' is not session-enabled (RequiresSession false): ${error.message}`,
          );
          logger.error("session mode on an entity without sessions: receiving stopped", {
            error: this.mismatch,
          });
          this.running = false;
          return;
        }
        logger.warn("accepting a session failed; trying again", {
          code: isServiceBusError(error) ? error.code : undefined,
          error,
        });
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        continue;
      }
      await this.hold(session);
    }
  }

  private accept(): Promise<ServiceBusSessionReceiver> {
    const entity = parseEntity(this.options.queue);
    const options: ServiceBusSessionReceiverOptions = {
      receiveMode: "peekLock",
      // Renewed here for as long as the session is held, not for the SDK's fixed window.
      maxAutoLockRenewalDurationInMs: 0,
      skipParsingBodyAsJson: true,
      abortSignal: this.abort.signal,
    };
    const { client } = this.options;
    return entity.kind === "queue"
      ? client.acceptNextSession(entity.queue, options)
      : client.acceptNextSession(entity.topic, entity.subscription, options);
  }

  /** One session: its messages one at a time, until it is idle, its lock is lost, or the receiver stops. */
  private async hold(session: ServiceBusSessionReceiver): Promise<void> {
    const { logger } = this.options;
    this.open.add(session);
    const lockMs = Math.max(1_000, (session.sessionLockedUntilUtc?.getTime() ?? Date.now()) - Date.now());
    const renewal = setInterval(() => {
      session
        .renewSessionLock()
        .catch((error: unknown) =>
          logger.warn("renewing a session lock failed", { sessionId: session.sessionId, error }),
        );
    }, lockMs / 3);
    try {
      while (this.running) {
        const [message] = await session.receiveMessages(1, {
          maxWaitTimeInMs: this.sessionOptions.sessionIdleMs ?? 1_000,
        });
        if (!message) break;
        // Taken as the receiver stopped: left unsettled, it goes back uncounted when the session closes.
        if (!this.running) break;
        await this.run(session, message);
      }
    } catch (error) {
      logger.warn("session ended", {
        sessionId: session.sessionId,
        code: isServiceBusError(error) ? error.code : undefined,
        error,
      });
    } finally {
      clearInterval(renewal);
      this.open.delete(session);
      await session.close().catch(() => undefined);
    }
  }
}
