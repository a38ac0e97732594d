import type { DeadLetter, Selector } from "./dead-letter.ts";

/**
 * What an operator selects in the dead-letter queue, in `sbinbox dlq` (flags) and `sbinbox console` (a group or
 * ticked messages) alike. Every part given must match.
 */
export interface Selection {
  /** MessageIds, or inbox keys: a retry or replay copy is found by its original's MessageId too. */
  readonly ids?: readonly string[];
  /** Exactly these messages, by sequence number (what the console confirmed). */
  readonly sequenceNumbers?: readonly string[];
  readonly reason?: string;
  /** Enqueued longer ago than this. */
  readonly olderThanMs?: number;
  readonly all?: boolean;
}

/** The selector for a selection; refuses an empty one, so no write ever means "everything" by omission. */
export function selectorOf(selection: Selection, now: () => number = Date.now): Selector {
  const ids = selection.ids && selection.ids.length > 0 ? new Set(selection.ids) : undefined;
  const seqs =
    selection.sequenceNumbers && selection.sequenceNumbers.length > 0
      ? new Set(selection.sequenceNumbers)
      : undefined;
  const { reason, olderThanMs, all } = selection;
  const narrowed =
    ids !== undefined || seqs !== undefined || reason !== undefined || olderThanMs !== undefined;
  if (!narrowed && !all) throw new Error("nothing selected");
  if (all && narrowed) throw new Error("--all cannot be combined with another selection");
  return (m: DeadLetter) =>
    // A retry copy or a replay has a MessageId of its own; the operator knows the original's, the inbox key.
    (ids === undefined || ids.has(m.messageId) || ids.has(m.inboxKey)) &&
    (seqs === undefined || seqs.has(m.sequenceNumber)) &&
    (reason === undefined || m.reason === reason) &&
    (olderThanMs === undefined ||
      (m.enqueuedTime !== undefined && now() - m.enqueuedTime.getTime() > olderThanMs));
}

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** An age such as 30s, 15m, 12h or 7d, in milliseconds; `option` names the flag in the error. */
export function duration(text: string, option = "--older-than"): number {
  const match = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim());
  if (!match) throw new Error(`${option} "${text}" must be a number and a unit: ms, s, m, h or d (e.g. 7d)`);
  return Number(match[1]) * UNITS[match[2]!]!;
}
