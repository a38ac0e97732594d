// What a queue stores and hands out, and the receive link it hands it to: a leaf of the broker's entities, which the
// queue, its sessions, forwarding and the wire code share without importing each other for their types.
import type { MessageParts } from "./codec.ts";

/** A message the broker dead-lettered on its own: its MessageId, reason and description. */
export type BrokerDeadLetterListener = (messageId: string, reason: string, description: string) => void;

export type MessageState = "active" | "locked" | "deferred" | "scheduled" | "gone";

export interface StoredMessage {
  seq: number;
  parts: MessageParts;
  enqueuedAt: number;
  expiresAt: number;
  /** Prior delivery attempts, as the AMQP header counts them (the first delivery carries 0). */
  deliveryCount: number;
  state: MessageState;
  /** True while a message received through receiveDeferredMessages is locked: settling it differs. */
  wasDeferred: boolean;
  scheduledAt: number;
  lockToken: string | undefined;
  lockedUntil: number;
  deadLetterSource: string | undefined;
  /** Bytes counted against the entity's size when it was stored (the parts can change later, by abandon). */
  storedBytes: number;
}

/** A receive link as the queue sees it. */
export interface Consumer {
  readonly receiveAndDelete: boolean;
  credit(): number;
  /** True once the link is gone, including a dropped connection that never detached it. */
  isClosed(): boolean;
  deliver(message: StoredMessage, lockToken: string | undefined): void;
  /** False when throttling holds this delivery back (the message stays available, its count unchanged). */
  mayDeliver?(): boolean;
}

export interface QueueCounts {
  active: number;
  locked: number;
  scheduled: number;
  deferred: number;
  deadLettered: number;
  duplicatesDropped: number;
  expired: number;
}

export type Settlement =
  | { kind: "complete" }
  | { kind: "abandon"; properties?: Record<string, unknown> }
  | { kind: "defer"; properties?: Record<string, unknown> }
  | { kind: "deadLetter"; reason?: string; description?: string; properties?: Record<string, unknown> };

export type SettleResult = "ok" | "lockLost";

/** Inserts `message` into `list`, kept ascending by `key`, after any entries with an equal key. */
export function insertSorted(
  list: StoredMessage[],
  message: StoredMessage,
  key: (m: StoredMessage) => number,
): void {
  const k = key(message);
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (key(list[mid]!) <= k) lo = mid + 1;
    else hi = mid;
  }
  list.splice(lo, 0, message);
}
