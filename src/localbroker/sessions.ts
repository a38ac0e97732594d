import type { MessageParts } from "./codec.ts";
import type { QueueSettings } from "./entity-settings.ts";
import type { Consumer, StoredMessage } from "./stored-message.ts";

/**
 * What the sessions use of the queue they belong to (queue.ts), which keeps sequence numbers, delivery counts,
 * settlement and the dead-letter queue; an interface, so the queue can hold its Sessions without a cycle.
 */
export interface SessionQueue {
  readonly settings: QueueSettings;
  pump(): void;
  handOut(message: StoredMessage, consumer: Consumer): void;
  unlock(message: StoredMessage, countAttempt: boolean): void;
  expire(message: StoredMessage): void;
  moveToDeadLetter(message: StoredMessage, reason: string | undefined, description: string | undefined): void;
}

/** Service Bus's own words for a message without a session id on a session entity (Azure/azure-service-bus#196). */
export const NO_SESSION_ID_SEND =
  "The SessionId was not set on a message, and it cannot be sent to the entity. Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.";
export const NO_SESSION_ID_REASON = "Session id is null.";
const NO_SESSION_ID_DESCRIPTION =
  "Session enabled entity doesn't allow a message whose session identifier is null.";

/** A receive link bound to one session; the session tells it when its lock is gone. */
export interface SessionHolder extends Consumer {
  /** The session lock expired: the link is detached with com.microsoft:session-lock-lost. */
  sessionLockLost(): void;
}

/** A "next available session" attach waiting for a session, until its deadline. */
export interface SessionWaiter {
  readonly deadline: number;
  /** The link that will hold the session it is given. */
  readonly holder: SessionHolder;
  /** Called once: with the session its holder now holds, or undefined when the deadline passed. */
  settle(session: Session | undefined): void;
}

export interface Session {
  readonly id: string;
  /** Available messages of the session in sequence order; the head is the next one delivered. */
  available: StoredMessage[];
  /** Messages delivered under the current lock and not yet settled (entries go stale as they settle). */
  readonly delivered: Set<StoredMessage>;
  state: Buffer | undefined;
  holder: SessionHolder | undefined;
  lockedUntil: number;
}

/**
 * The sessions of one session-enabled queue or subscription: each session's messages in sequence order, one
 * lock per session (an umbrella over its messages' locks, as Service Bus has it), session state, and receivers
 * waiting for the next unlocked session. The Queue keeps sequence numbers, delivery counts, settlement and the
 * dead-letter queue; this decides which message may go to which receiver.
 */
export class Sessions {
  private readonly queue: SessionQueue;
  readonly now: () => number;
  private readonly sessions = new Map<string, Session>();
  private waiters: SessionWaiter[] = [];

  constructor(queue: SessionQueue, now: () => number) {
    this.queue = queue;
    this.now = now;
  }

  /** An active message joins its session's tail; one without a session id is dead-lettered, as a subscription does. */
  enqueue(message: StoredMessage): void {
    const id = sessionIdOf(message);
    if (id === undefined) {
      this.queue.moveToDeadLetter(message, NO_SESSION_ID_REASON, NO_SESSION_ID_DESCRIPTION);
      return;
    }
    this.session(id).available.push(message);
    this.queue.pump();
  }

  /** Abandon, a lock lost, a session released: the message goes back to its place at the session's head. */
  returnToHead(message: StoredMessage): void {
    const id = sessionIdOf(message);
    if (id === undefined) return;
    const list = this.session(id).available;
    let i = 0;
    while (i < list.length && list[i]!.seq < message.seq) i++;
    list.splice(i, 0, message);
  }

  /** The lock a session message gets when delivered: its session's. */
  lockFor(message: StoredMessage): number {
    const session = this.sessions.get(sessionIdOf(message) ?? "");
    if (session) session.delivered.add(message);
    return session?.lockedUntil ?? this.now();
  }

  /** False once the message's session lock is gone; an expired one is released here, before the caller goes on. */
  holdsLock(message: StoredMessage): boolean {
    const session = this.sessions.get(sessionIdOf(message) ?? "");
    if (!session?.holder) return false;
    if (session.lockedUntil <= this.now()) {
      this.expire(session);
      return false;
    }
    return true;
  }

  /**
   * acceptSession(id): the session's lock, or the refusal when another receiver holds it. A session with no
   * messages can be accepted too: it then gets the messages sent to it later.
   */
  acceptById(id: string, holder: SessionHolder): Session | undefined {
    const session = this.session(id);
    if (session.holder && !this.lapsed(session)) return undefined;
    this.lock(session, holder);
    return session;
  }

  /** acceptNextSession: the unlocked session whose head is oldest, now or when one comes, until the deadline. */
  acceptNext(waiter: SessionWaiter): void {
    this.waiters.push(waiter);
    this.queue.pump();
  }

  /** The receiver detached: its session is free at once, its unsettled messages back at the head, uncounted. */
  release(holder: SessionHolder): void {
    for (const session of this.sessions.values()) {
      if (session.holder !== holder) continue;
      session.holder = undefined;
      for (const message of sorted(session.delivered)) this.queue.unlock(message, false);
      session.delivered.clear();
    }
    this.waiters = this.waiters.filter((w) => w.holder !== holder);
    this.queue.pump();
  }

  renew(id: string): number | undefined {
    const session = this.sessions.get(id);
    if (!session?.holder || this.lapsed(session)) return undefined;
    session.lockedUntil = this.now() + this.queue.settings.lockDurationMs;
    for (const message of session.delivered) message.lockedUntil = session.lockedUntil;
    return session.lockedUntil;
  }

  /** The state of a locked session (Service Bus asks for the session's lock to read or write it). */
  lockedSession(id: string): Session | undefined {
    const session = this.sessions.get(id);
    if (!session?.holder || this.lapsed(session)) return undefined;
    return session;
  }

  /** Queue.pump for a session entity: each held session's messages, in order, to its receiver while it has credit. */
  deliver(): void {
    for (const session of this.sessions.values()) {
      const holder = session.holder;
      if (!holder || holder.isClosed()) continue;
      while (holder.credit() > 0) {
        const message = this.takeHead(session);
        if (!message) break;
        this.queue.handOut(message, holder);
      }
    }
    this.serveWaiters();
  }

  /** The timer: session locks that expired, waiters past their deadline. */
  tick(now: number): void {
    for (const session of this.sessions.values())
      if (session.holder && session.lockedUntil <= now) this.expire(session);
    if (this.waiters.some((w) => w.deadline <= now || w.holder.isClosed())) {
      const due = this.waiters.filter((w) => w.deadline <= now && !w.holder.isClosed());
      this.waiters = this.waiters.filter((w) => w.deadline > now && !w.holder.isClosed());
      for (const waiter of due) waiter.settle(undefined);
    }
  }

  /** Expires available messages past their time to live; returns the earliest expiry left. */
  expireDue(now: number): number {
    let earliest = Infinity;
    for (const session of this.sessions.values()) {
      const keep: StoredMessage[] = [];
      for (const message of session.available) {
        if (message.state !== "active") continue;
        if (message.expiresAt <= now) this.queue.expire(message);
        else {
          keep.push(message);
          earliest = Math.min(earliest, message.expiresAt);
        }
      }
      session.available = keep;
    }
    return earliest;
  }

  private session(id: string): Session {
    let session = this.sessions.get(id);
    if (!session) {
      session = {
        id,
        available: [],
        delivered: new Set(),
        state: undefined,
        holder: undefined,
        lockedUntil: 0,
      };
      this.sessions.set(id, session);
    }
    return session;
  }

  private lock(session: Session, holder: SessionHolder): void {
    session.holder = holder;
    session.lockedUntil = this.now() + this.queue.settings.lockDurationMs;
    session.delivered.clear();
  }

  /** True when the session's lock has run out; it is then released as an expiry. */
  private lapsed(session: Session): boolean {
    if (session.lockedUntil > this.now()) return false;
    this.expire(session);
    return true;
  }

  /**
   * The session lock ran out: each message delivered under it counts one attempt (MaxDeliveryCount applies) and
   * goes back to the head, the receiver's link is detached, and the session is free for the next receiver.
   */
  private expire(session: Session): void {
    const holder = session.holder;
    session.holder = undefined;
    for (const message of sorted(session.delivered)) this.queue.unlock(message, true);
    session.delivered.clear();
    holder?.sessionLockLost();
    this.queue.pump();
  }

  private takeHead(session: Session): StoredMessage | undefined {
    const now = this.now();
    while (session.available.length > 0) {
      const message = session.available.shift()!;
      if (message.state !== "active") continue;
      if (message.expiresAt <= now) {
        this.queue.expire(message);
        continue;
      }
      return message;
    }
    return undefined;
  }

  private serveWaiters(): void {
    while (this.waiters.length > 0) {
      const waiter = this.waiters[0]!;
      if (waiter.holder.isClosed()) {
        this.waiters.shift();
        continue;
      }
      const session = this.nextFree();
      if (!session) return;
      this.waiters.shift();
      this.lock(session, waiter.holder);
      waiter.settle(session);
    }
  }

  /** The unlocked session with an available message whose head came first (an expired lock counts as unlocked). */
  private nextFree(): Session | undefined {
    let best: Session | undefined;
    let bestSeq = Infinity;
    for (const session of this.sessions.values()) {
      if (session.holder && session.lockedUntil > this.now()) continue;
      const head = session.available.find((m) => m.state === "active");
      if (head && head.seq < bestSeq) {
        best = session;
        bestSeq = head.seq;
      }
    }
    if (best?.holder) this.expire(best);
    return best;
  }
}

export function sessionIdOf(message: StoredMessage): string | undefined {
  return sessionIdOfParts(message.parts);
}

/** The session id is the AMQP group-id property. */
export function sessionIdOfParts(parts: MessageParts): string | undefined {
  const id = parts.head.group_id;
  return typeof id === "string" ? id : undefined;
}

/** No session named matches every message (a plain peek); a named one matches its own messages only. */
export function inSession(message: StoredMessage, sessionId: string | undefined): boolean {
  return sessionId === undefined || sessionIdOf(message) === sessionId;
}

function sorted(messages: Iterable<StoredMessage>): StoredMessage[] {
  return [...messages].filter((m) => m.state === "locked").sort((a, b) => a.seq - b.seq);
}
