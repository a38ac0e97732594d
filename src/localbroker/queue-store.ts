import type { MessageParts } from "./codec.ts";
import type { QueueSettings } from "./entity-settings.ts";
import { inSession } from "./sessions.ts";
import type { BrokerDeadLetterListener, QueueCounts, StoredMessage } from "./stored-message.ts";

/**
 * What a queue (queue.ts) stores and counts: its messages by sequence number in every state, their bytes against
 * the entity's size, the lock tokens that hold them, and the listeners told of drops and dead letters. Delivery,
 * locking and settlement rules are the Queue's; this is the bookkeeping they share, and peek reads.
 */
export abstract class QueueStore<Self extends QueueStore<Self>> {
  readonly name: string;
  readonly settings: QueueSettings;
  readonly deadLetter: Self | undefined;
  protected readonly now: () => number;
  protected readonly nextSequence: () => number;
  protected readonly bySeq = new Map<number, StoredMessage>();
  /** Insertion order is expiry order: every lock lasts the queue's lock duration and a renewal re-inserts. */
  protected readonly locks = new Map<string, StoredMessage>();
  protected duplicatesDropped = 0;
  /** Told each MessageId duplicate detection drops; called only on a drop, so a send pays nothing for it. */
  protected readonly dropListeners = new Set<(messageIdKey: string) => void>();
  protected readonly deadLetterListeners = new Set<BrokerDeadLetterListener>();
  protected expired = 0;
  private bytes = 0;

  constructor(settings: QueueSettings, now: () => number, deadLetter: Self | undefined, name?: string) {
    this.settings = settings;
    this.name = name ?? settings.name;
    this.now = now;
    this.deadLetter = deadLetter;
    let sequence = 0;
    this.nextSequence = () => ++sequence;
  }

  get isDeadLetterQueue(): boolean {
    return this.deadLetter === undefined;
  }

  /** A new message, stored and counted, with the next sequence number; the caller makes it active or scheduled. */
  protected store(parts: MessageParts, now: number): StoredMessage {
    const message: StoredMessage = {
      seq: this.nextSequence(),
      parts,
      enqueuedAt: now,
      expiresAt: Infinity,
      deliveryCount: 0,
      state: "active",
      wasDeferred: false,
      scheduledAt: 0,
      lockToken: undefined,
      lockedUntil: 0,
      deadLetterSource: undefined,
      storedBytes: parts.size,
    };
    this.restore(message);
    return message;
  }

  /** A message stored again as it is now (dead-lettered into this queue): counted at its present size. */
  protected restore(message: StoredMessage): void {
    message.storedBytes = message.parts.size;
    this.bySeq.set(message.seq, message);
    this.bytes += message.storedBytes;
  }

  /** Calls `listener` with the MessageId of every send dropped as a duplicate from now on; returns its removal. */
  onDuplicateDropped(listener: (messageIdKey: string) => void): () => void {
    this.dropListeners.add(listener);
    return () => this.dropListeners.delete(listener);
  }

  /** Calls `listener` for every message the broker dead-letters itself (delivery count, expiry); returns its removal. */
  onDeadLettered(listener: BrokerDeadLetterListener): () => void {
    this.deadLetterListeners.add(listener);
    return () => this.deadLetterListeners.delete(listener);
  }

  protected remove(message: StoredMessage): void {
    message.state = "gone";
    if (message.lockToken !== undefined) this.locks.delete(message.lockToken);
    message.lockToken = undefined;
    if (this.bySeq.delete(message.seq)) this.bytes -= message.storedBytes;
  }

  /**
   * Batch delete (learn.microsoft.com, "Batch delete messages in Azure Service Bus"): up to `count` of the oldest
   * messages enqueued before `before` (now when absent), in sequence order, of one session when `sessionId` is given. A locked
   * message is not eligible and stays, as Microsoft's page says; a scheduled one is not enqueued yet. Returns the
   * number deleted.
   */
  deleteBatch(count: number, before: number | undefined, sessionId?: string): number {
    const cutoff = before ?? this.now();
    let deleted = 0;
    for (const message of [...this.bySeq.values()].sort((a, b) => a.seq - b.seq)) {
      if (deleted >= count) break;
      if (message.state !== "active" && message.state !== "deferred") continue;
      if (message.enqueuedAt >= cutoff || !inSession(message, sessionId)) continue;
      this.remove(message);
      deleted += 1;
    }
    return deleted;
  }

  /** Peek sees active, locked, deferred and scheduled messages in sequence order, without locking them. */
  peek(fromSeq: number, count: number, sessionId?: string): StoredMessage[] {
    const result: StoredMessage[] = [];
    for (const message of [...this.bySeq.values()].sort((a, b) => a.seq - b.seq)) {
      if (message.seq < fromSeq || message.state === "gone" || !inSession(message, sessionId)) continue;
      result.push(message);
      if (result.length >= count) break;
    }
    return result;
  }

  /**
   * Bytes the entity holds, as Service Bus counts it against MaxSizeInMegabytes: every stored message (active,
   * locked, deferred, scheduled) and its dead-letter subqueue.
   */
  sizeBytes(): number {
    return this.bytes + (this.deadLetter?.sizeBytes() ?? 0);
  }

  /** The QuotaExceeded refusal for `incoming` more bytes, or undefined when they fit. */
  quotaExceeded(incoming: number): string | undefined {
    const max = this.settings.maxSizeBytes;
    const size = this.sizeBytes();
    if (size + incoming <= max) return undefined;
    return `The maximum entity size has been reached or exceeded for Queue: '${this.name}'. Size of entity in bytes:${size}, Max entity size in bytes: ${max}.`;
  }

  counts(): QueueCounts {
    const counts: QueueCounts = {
      active: 0,
      locked: 0,
      scheduled: 0,
      deferred: 0,
      deadLettered: 0,
      duplicatesDropped: this.duplicatesDropped,
      expired: this.expired,
    };
    for (const message of this.bySeq.values()) {
      if (message.state === "active") counts.active += 1;
      else if (message.state === "locked") counts.locked += 1;
      else if (message.state === "scheduled") counts.scheduled += 1;
      else if (message.state === "deferred") counts.deferred += 1;
    }
    if (this.deadLetter) {
      const dlq = this.deadLetter.counts();
      counts.deadLettered = dlq.active + dlq.locked + dlq.deferred;
    }
    return counts;
  }
}
