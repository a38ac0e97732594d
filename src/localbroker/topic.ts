import type { MessageParts } from "./codec.ts";
import { DuplicateWindow } from "./duplicates.ts";
import type { TopicSettings } from "./entity-settings.ts";
import { Queue, type QueueCounts } from "./queue.ts";
import { filterInput, type Rule } from "./rules.ts";

export interface Subscription {
  readonly name: string;
  readonly queue: Queue;
  /** Changed at run time by add-rule and remove-rule (rule-management.ts); read on each send. */
  readonly rules: Rule[];
}

interface ScheduledSend {
  seq: number;
  at: number;
  parts: MessageParts;
}

export interface TopicCounts {
  duplicatesDropped: number;
  /** Sends no subscription's rules matched: Service Bus drops them too. */
  unmatched: number;
  scheduled: number;
}

/**
 * A topic: duplicate detection and the size cap are the topic's; each send is copied to every subscription with a
 * rule that matches it, evaluated when the message is enqueued (at once, or when a scheduled one comes due). Each
 * subscription is a Queue of its own, so locks, delivery counts, MaxDeliveryCount and the dead-letter subqueue are
 * per subscription.
 */
export class Topic {
  readonly name: string;
  readonly settings: TopicSettings;
  readonly subscriptions: readonly Subscription[];
  private readonly now: () => number;
  private readonly duplicates: DuplicateWindow;
  private scheduled: ScheduledSend[] = [];
  private sequence = 0;
  private duplicatesDropped = 0;
  private unmatched = 0;

  constructor(settings: TopicSettings, now: () => number) {
    this.name = settings.name;
    this.settings = settings;
    this.now = now;
    this.duplicates = new DuplicateWindow(settings.duplicateDetectionWindowMs);
    this.subscriptions = settings.subscriptions.map((s) => {
      const deadLetter = new Queue(s.queue, now, undefined, `${s.queue.name}/$DeadLetterQueue`);
      const queue = new Queue(s.queue, now, deadLetter);
      const rules = [...s.rules];
      queue.rules = rules;
      return { name: s.name, queue, rules };
    });
  }

  subscription(name: string): Subscription | undefined {
    const key = name.toLowerCase();
    return this.subscriptions.find((s) => s.name.toLowerCase() === key);
  }

  /** A send: dropped in silence when duplicate detection has seen its MessageId, else fanned out (or scheduled). */
  send(parts: MessageParts, messageIdKey: string): number | undefined {
    const now = this.now();
    if (this.isDuplicate(messageIdKey, now)) return undefined;
    const at = scheduledTime(parts);
    if (at > now) return this.hold(parts, at);
    this.fanOut(parts);
    return ++this.sequence;
  }

  /** schedule-message on the topic; a duplicate is dropped and still gets a number, as on a queue. */
  schedule(parts: MessageParts, messageIdKey: string): number {
    const now = this.now();
    if (this.isDuplicate(messageIdKey, now)) return ++this.sequence;
    return this.hold(parts, Math.max(scheduledTime(parts), now));
  }

  cancelScheduled(seqs: number[]): void {
    const cancel = new Set(seqs);
    this.scheduled = this.scheduled.filter((s) => !cancel.has(s.seq));
  }

  tick(): void {
    const now = this.now();
    while (this.scheduled.length > 0 && this.scheduled[0]!.at <= now)
      this.fanOut(this.scheduled.shift()!.parts);
    for (const s of this.subscriptions) {
      s.queue.tick();
      s.queue.deadLetter?.tick();
    }
  }

  /** The QuotaExceeded refusal when `incoming` bytes would take the topic past its size. */
  quotaExceeded(incoming: number): string | undefined {
    const size =
      this.subscriptions.reduce((sum, s) => sum + s.queue.sizeBytes(), 0) +
      this.scheduled.reduce((sum, s) => sum + s.parts.size, 0);
    if (size + incoming <= this.settings.maxSizeBytes) return undefined;
    return `The maximum entity size has been reached or exceeded for Topic: '${this.name}'. Size of entity in bytes:${size}, Max entity size in bytes: ${this.settings.maxSizeBytes}.`;
  }

  counts(): TopicCounts {
    return {
      duplicatesDropped: this.duplicatesDropped,
      unmatched: this.unmatched,
      scheduled: this.scheduled.length,
    };
  }

  subscriptionCounts(name: string): QueueCounts | undefined {
    return this.subscription(name)?.queue.counts();
  }

  private hold(parts: MessageParts, at: number): number {
    const seq = ++this.sequence;
    const entry = { seq, at, parts };
    const index = this.scheduled.findIndex((s) => s.at > at);
    if (index < 0) this.scheduled.push(entry);
    else this.scheduled.splice(index, 0, entry);
    return seq;
  }

  /** One copy per subscription with a matching rule: each copy's parts are its own, as abandon rewrites them. */
  private fanOut(parts: MessageParts): void {
    const input = filterInput(parts);
    let matched = 0;
    for (const s of this.subscriptions) {
      if (!s.rules.some((rule) => rule.matches(input))) continue;
      matched += 1;
      const copy: MessageParts = {
        head: { ...parts.head, message_annotations: { ...parts.head.message_annotations } },
        properties: parts.properties,
        tail: parts.tail,
        size: parts.size,
      };
      s.queue.enqueueCopy(copy);
    }
    if (matched === 0) this.unmatched += 1;
  }

  private isDuplicate(messageIdKey: string, now: number): boolean {
    if (!this.settings.requiresDuplicateDetection || !this.duplicates.seen(messageIdKey, now)) return false;
    this.duplicatesDropped += 1;
    return true;
  }
}

function scheduledTime(parts: MessageParts): number {
  const at = parts.head.message_annotations?.["x-opt-scheduled-enqueue-time"];
  return at instanceof Date ? at.getTime() : typeof at === "number" ? at : 0;
}
