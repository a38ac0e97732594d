import { messageIdKey, modifyApplicationProperties, type MessageParts } from "./codec.ts";
import { QueueStore } from "./queue-store.ts";
import { DeliveryOrder } from "./delivery-order.ts";
import { DuplicateWindow } from "./duplicates.ts";
import type { QueueSettings } from "./entity-settings.ts";
import { newLockToken } from "./lock-token.ts";
import type { Rule } from "./rules.ts";
import { inSession, Sessions } from "./sessions.ts";
import {
  insertSorted,
  type Consumer,
  type Settlement,
  type SettleResult,
  type StoredMessage,
} from "./stored-message.ts";

export type {
  BrokerDeadLetterListener,
  Consumer,
  MessageState,
  QueueCounts,
  Settlement,
  SettleResult,
  StoredMessage,
} from "./stored-message.ts";

/**
 * One queue (or its dead-letter subqueue): ordering, locks, delivery counts, duplicate detection, scheduling
 * and expiry. Time comes from `now` so the rules can be read against a clock; timers live in the broker.
 */
export class Queue extends QueueStore<Queue> {
  /** Present on a session-enabled queue or subscription (not on its dead-letter queue, which has no sessions). */
  readonly sessions: Sessions | undefined;
  /** A subscription's rules (its topic's Subscription holds the same array); undefined on a queue. */
  rules: Rule[] | undefined;
  private readonly order = new DeliveryOrder();
  private scheduled: StoredMessage[] = [];
  private readonly duplicates: DuplicateWindow;
  private earliestExpiry = Infinity;
  private consumers: Consumer[] = [];
  private roundRobin = 0;
  private pumping = false;

  constructor(settings: QueueSettings, now: () => number, deadLetter: Queue | undefined, name?: string) {
    super(settings, now, deadLetter, name);
    this.duplicates = new DuplicateWindow(settings.duplicateDetectionWindowMs);
    this.sessions = deadLetter && settings.requiresSession ? new Sessions(this, now) : undefined;
  }

  /** Returns the sequence number, or undefined when duplicate detection dropped the message. */
  send(parts: MessageParts, messageIdKey: string): number | undefined {
    const now = this.now();
    if (this.isDuplicate(messageIdKey, now)) return undefined;
    const scheduledFor = parts.head.message_annotations?.["x-opt-scheduled-enqueue-time"];
    const scheduledAt =
      scheduledFor instanceof Date
        ? scheduledFor.getTime()
        : typeof scheduledFor === "number"
          ? scheduledFor
          : 0;
    return this.add(parts, now, scheduledAt);
  }

  /**
   * schedule-message over $management: the time is in the message's annotation, set by the SDK. Duplicate detection
   * applies as to a send: Service Bus drops a scheduled duplicate in silence and still answers with a sequence
   * number (Azure/azure-service-bus#265), which then names no message.
   */
  schedule(parts: MessageParts, messageIdKey: string): number {
    const now = this.now();
    if (this.isDuplicate(messageIdKey, now)) return this.nextSequence();
    const at = parts.head.message_annotations?.["x-opt-scheduled-enqueue-time"];
    const scheduledAt = at instanceof Date ? at.getTime() : typeof at === "number" ? at : now;
    return this.add(parts, now, scheduledAt);
  }

  /** A topic's copy for this subscription: the topic has done duplicate detection and scheduling. */
  enqueueCopy(parts: MessageParts): number {
    return this.add(parts, this.now(), 0);
  }

  /** True when duplicate detection drops this MessageId; otherwise records it for the window. */
  private isDuplicate(messageIdKey: string, now: number): boolean {
    if (!this.settings.requiresDuplicateDetection || this.isDeadLetterQueue) return false;
    if (!this.duplicates.seen(messageIdKey, now)) return false;
    this.duplicatesDropped += 1;
    for (const listener of this.dropListeners) listener(messageIdKey);
    return true;
  }

  private brokerDeadLetter(message: StoredMessage, reason: string, description: string): void {
    this.moveToDeadLetter(message, reason, description);
    const id = messageIdKey(message.parts.head.message_id) ?? "";
    for (const listener of this.deadLetterListeners) listener(id, reason, description);
  }

  private add(parts: MessageParts, now: number, scheduledAt: number): number {
    const message = this.store(parts, now);
    if (scheduledAt > now) {
      message.state = "scheduled";
      message.scheduledAt = scheduledAt;
      insertSorted(this.scheduled, message, (m) => m.scheduledAt);
    } else {
      this.activate(message, now);
    }
    return message.seq;
  }

  private activate(message: StoredMessage, now: number): void {
    message.state = "active";
    message.enqueuedAt = now;
    const ttl = message.parts.head.ttl;
    const ttlMs =
      typeof ttl === "number" && ttl > 0
        ? Math.min(ttl, this.settings.defaultTimeToLiveMs)
        : this.settings.defaultTimeToLiveMs;
    message.expiresAt = this.isDeadLetterQueue ? Infinity : now + ttlMs;
    this.earliestExpiry = Math.min(this.earliestExpiry, message.expiresAt);
    if (this.sessions) return this.sessions.enqueue(message);
    this.order.push(message);
    this.pump();
  }

  /** A dead-lettered message keeps its sequence number and enqueued time, as in Service Bus. */
  receiveDeadLettered(message: StoredMessage): void {
    message.state = "active";
    message.lockToken = undefined;
    message.wasDeferred = false;
    message.expiresAt = Infinity;
    this.restore(message);
    this.order.push(message);
    this.pump();
  }

  addConsumer(consumer: Consumer): void {
    this.consumers.push(consumer);
    this.pump();
  }

  removeConsumer(consumer: Consumer): void {
    this.consumers = this.consumers.filter((c) => c !== consumer);
  }

  /** Hands available messages to consumers with credit, one at a time in turn, so competing receivers share. */
  pump(): void {
    if (this.pumping || (this.consumers.length === 0 && !this.sessions)) return;
    this.pumping = true;
    try {
      if (this.sessions) return this.sessions.deliver();
      for (;;) {
        const consumer = this.nextConsumerWithCredit();
        if (!consumer) break;
        const message = this.order.take(this.now(), (expired) => this.expire(expired));
        if (!message) break;
        if (consumer.mayDeliver?.() === false) {
          // Throttled: the message goes back to the head, unlocked and uncounted; that link waits (consumer.ts).
          this.order.putBack(message);
          continue;
        }
        this.handOut(message, consumer);
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Delivers one message: removed in receive-and-delete, locked in peek-lock. */
  handOut(message: StoredMessage, consumer: Consumer): void {
    if (consumer.receiveAndDelete) {
      this.remove(message);
      consumer.deliver(message, undefined);
    } else {
      const token = this.lock(message);
      consumer.deliver(message, token);
    }
  }

  private nextConsumerWithCredit(): Consumer | undefined {
    if (this.consumers.some((c) => c.isClosed()))
      this.consumers = this.consumers.filter((c) => !c.isClosed());
    const n = this.consumers.length;
    for (let i = 0; i < n; i++) {
      const index = (this.roundRobin + i) % n;
      const consumer = this.consumers[index]!;
      if (consumer.credit() > 0) {
        this.roundRobin = (index + 1) % n;
        return consumer;
      }
    }
    return undefined;
  }

  private lock(message: StoredMessage): string {
    const token = newLockToken();
    message.state = "locked";
    message.lockToken = token;
    message.lockedUntil = this.sessions?.lockFor(message) ?? this.now() + this.settings.lockDurationMs;
    this.locks.set(token, message);
    return token;
  }

  /** The message a live lock token holds, or undefined when the lock is lost (expired, settled, unknown). */
  private locked(token: string): StoredMessage | undefined {
    const message = this.locks.get(token);
    if (!message || message.state !== "locked" || message.lockToken !== token) return undefined;
    if (this.sessions) return this.sessions.holdsLock(message) ? message : undefined;
    if (message.lockedUntil <= this.now()) {
      this.lockExpired(message);
      return undefined;
    }
    return message;
  }

  settle(token: string, settlement: Settlement): SettleResult {
    const message = this.locked(token);
    if (!message) return "lockLost";
    this.locks.delete(token);
    message.lockToken = undefined;
    switch (settlement.kind) {
      case "complete":
        this.remove(message);
        break;
      case "abandon":
        if (settlement.properties) modifyApplicationProperties(message.parts, settlement.properties);
        this.releaseLock(message);
        break;
      case "defer":
        if (settlement.properties) modifyApplicationProperties(message.parts, settlement.properties);
        message.state = "deferred";
        message.wasDeferred = false;
        break;
      case "deadLetter":
        this.moveToDeadLetter(message, settlement.reason, settlement.description, settlement.properties);
        break;
    }
    return "ok";
  }

  /** Abandon and lock expiry: one more delivery attempt counted; past MaxDeliveryCount the message is dead-lettered. */
  private releaseLock(message: StoredMessage): void {
    message.lockToken = undefined;
    if (message.wasDeferred) {
      message.state = "deferred";
      message.wasDeferred = false;
      return;
    }
    message.deliveryCount += 1;
    if (message.deliveryCount >= this.settings.maxDeliveryCount && !this.isDeadLetterQueue) {
      this.brokerDeadLetter(
        message,
        "MaxDeliveryCountExceeded",
        `Message could not be consumed after ${this.settings.maxDeliveryCount} delivery attempts.`,
      );
      return;
    }
    message.state = "active";
    if (this.sessions) this.sessions.returnToHead(message);
    else this.order.putBack(message);
    this.pump();
  }

  private lockExpired(message: StoredMessage): void {
    if (message.lockToken !== undefined) this.locks.delete(message.lockToken);
    this.releaseLock(message);
  }

  /**
   * A session lock's end for one message it covered: counted as an attempt when the lock expired, not when its
   * receiver closed the session (the table in Microsoft's "Message sessions").
   */
  unlock(message: StoredMessage, countAttempt: boolean): void {
    if (countAttempt) return this.lockExpired(message);
    if (message.lockToken !== undefined) this.locks.delete(message.lockToken);
    message.lockToken = undefined;
    if (message.wasDeferred) {
      message.state = "deferred";
      message.wasDeferred = false;
      return;
    }
    message.state = "active";
    this.sessions?.returnToHead(message);
  }

  moveToDeadLetter(
    message: StoredMessage,
    reason: string | undefined,
    description: string | undefined,
    properties?: Record<string, unknown>,
  ): void {
    this.remove(message);
    const target = this.deadLetter;
    if (!target) return; // dead-lettering from the dead-letter queue drops the message, as there is nowhere further
    const changes: Record<string, unknown> = { ...properties };
    if (reason !== undefined) changes["DeadLetterReason"] = reason;
    if (description !== undefined) changes["DeadLetterErrorDescription"] = description;
    modifyApplicationProperties(message.parts, changes);
    message.deadLetterSource = this.name;
    target.receiveDeadLettered(message);
  }

  expire(message: StoredMessage): void {
    this.expired += 1;
    if (this.settings.deadLetteringOnMessageExpiration) {
      this.brokerDeadLetter(message, "TTLExpiredException", "The message expired and was dead lettered.");
    } else {
      this.remove(message);
    }
  }

  renewLock(token: string): number | undefined {
    const message = this.locked(token);
    if (!message || this.sessions) return undefined;
    message.lockedUntil = this.now() + this.settings.lockDurationMs;
    this.locks.delete(token);
    this.locks.set(token, message);
    return message.lockedUntil;
  }

  /** receive-by-sequence-number: every number must name a deferred message, or nothing is received. */
  receiveDeferred(
    seqs: number[],
    receiveAndDelete: boolean,
    sessionId?: string,
  ): { message: StoredMessage; token: string | undefined }[] | undefined {
    const messages = seqs.map((s) => this.bySeq.get(s));
    if (messages.some((m) => !m || m.state !== "deferred" || !inSession(m, sessionId))) return undefined;
    return (messages as StoredMessage[]).map((message) => {
      // Each delivery of a deferred message counts the one before it, as Service Bus keeps them: received (0),
      // deferred, received by sequence number (1), abandoned, received again (2) (the SDK's own live tests,
      // deferredMessage.spec.ts), on a session entity too.
      message.deliveryCount += 1;
      if (receiveAndDelete) {
        this.remove(message);
        return { message, token: undefined };
      }
      message.wasDeferred = true;
      return { message, token: this.lock(message) };
    });
  }

  cancelScheduled(seqs: number[]): void {
    for (const seq of seqs) {
      const message = this.bySeq.get(seq);
      if (!message || message.state !== "scheduled") continue;
      this.remove(message);
      this.scheduled = this.scheduled.filter((m) => m !== message);
    }
  }

  /** Called by the broker's timer: expires locks, releases scheduled messages, expires messages past their TTL. */
  tick(): void {
    const now = this.now();
    this.sessions?.tick(now);
    for (const [token, message] of this.sessions ? [] : this.locks) {
      if (message.lockedUntil > now) break;
      this.locks.delete(token);
      if (message.state === "locked" && message.lockToken === token) this.lockExpired(message);
    }
    while (this.scheduled.length > 0 && this.scheduled[0]!.scheduledAt <= now) {
      const message = this.scheduled.shift()!;
      if (message.state === "scheduled") this.activate(message, now);
    }
    if (this.earliestExpiry <= now) this.expireDue(now);
  }

  private expireDue(now: number): void {
    const sessions = this.sessions?.expireDue(now) ?? Infinity;
    this.earliestExpiry = Math.min(
      sessions,
      this.order.expireDue(now, (message) => this.expire(message)),
    );
  }
}
