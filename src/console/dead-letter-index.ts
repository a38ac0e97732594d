import type { DeadLetter } from "../servicebus/dead-letter.ts";

/** A dead letter's reason as the console groups it; one without a reason gets this. */
export const NO_REASON = "(no reason)";

/** What an operator narrows the dead-letter queue to; every part given must match. */
export interface Filter {
  readonly reason?: string;
  /** The message type: its subject, else its `type` property. */
  readonly type?: string;
  /** A MessageId, or an inbox key (a retry or replay copy is found by its original's MessageId). */
  readonly messageId?: string;
  /** ISO times, inclusive: enqueued at or after, at or before. */
  readonly enqueuedFrom?: string;
  readonly enqueuedTo?: string;
}

export interface Tally {
  readonly name: string;
  readonly count: number;
}

/** The whole dead-letter queue as one peek saw it: every message, without bodies, counted by reason and type. */
export interface DeadLetterIndex {
  readonly at: Date;
  readonly messages: readonly DeadLetter[];
  readonly reasons: readonly Tally[];
  readonly types: readonly Tally[];
}

export function indexOf(messages: readonly DeadLetter[], at = new Date()): DeadLetterIndex {
  return {
    at,
    messages,
    reasons: tally(messages, (m) => m.reason ?? NO_REASON),
    types: tally(messages, (m) => m.type ?? "(none)"),
  };
}

/** A filter as a predicate; a time that is not one is refused by name rather than matching nothing. */
export function matcher(filter: Filter): (m: DeadLetter) => boolean {
  const from = time(filter.enqueuedFrom, "enqueuedFrom");
  const to = time(filter.enqueuedTo, "enqueuedTo");
  return (m) =>
    (filter.reason === undefined || (m.reason ?? NO_REASON) === filter.reason) &&
    (filter.type === undefined || m.type === filter.type) &&
    (filter.messageId === undefined || m.messageId === filter.messageId || m.inboxKey === filter.messageId) &&
    (from === undefined || (m.enqueuedTime !== undefined && m.enqueuedTime.getTime() >= from)) &&
    (to === undefined || (m.enqueuedTime !== undefined && m.enqueuedTime.getTime() <= to));
}

export interface Page {
  /** How many match the filter, in the whole queue; undefined while the first count is still under way. */
  readonly total: number | undefined;
  readonly offset: number;
  readonly messages: readonly DeadLetter[];
}

/** One page of the matching messages, oldest first. */
export function pageOf(index: DeadLetterIndex, filter: Filter, offset: number, limit: number): Page {
  const match = matcher(filter);
  const matching = index.messages.filter(match);
  return { total: matching.length, offset, messages: matching.slice(offset, offset + limit) };
}

/** Counts by key, most first. */
export function tally<T>(messages: readonly T[], key: (m: T) => string): Tally[] {
  const counts = new Map<string, number>();
  for (const m of messages) counts.set(key(m), (counts.get(key(m)) ?? 0) + 1);
  return [...counts].map(([name, count]) => ({ name, count })).sort((a, b) => b.count - a.count);
}

function time(text: string | undefined, name: string): number | undefined {
  if (text === undefined) return undefined;
  const t = Date.parse(text);
  if (Number.isNaN(t))
    throw new Error(`${name} "${text}" is not a time (ISO 8601, e.g. 2026-12-01T10:00:00Z)`);
  return t;
}
