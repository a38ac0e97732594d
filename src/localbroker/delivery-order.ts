import { insertSorted, type StoredMessage } from "./stored-message.ts";

/**
 * The order a queue without sessions hands its available messages out in: messages given back (abandoned, or
 * whose lock ran out) first, by sequence number, then the others as they became available. Entries go stale as
 * messages are settled, dead-lettered or expired elsewhere; they are skipped here, not searched for there.
 */
export class DeliveryOrder {
  private ready: StoredMessage[] = [];
  private readyHead = 0;
  private returned: StoredMessage[] = [];

  /** A message available for the first time (sent, due, dead-lettered into this queue). */
  push(message: StoredMessage): void {
    this.ready.push(message);
  }

  /** A message given back: it goes before those never delivered, in sequence order. */
  putBack(message: StoredMessage): void {
    insertSorted(this.returned, message, (m) => m.seq);
  }

  /** The next active message, expiring (by `expire`) each one past its time to live on the way. */
  take(now: number, expire: (message: StoredMessage) => void): StoredMessage | undefined {
    for (;;) {
      let message: StoredMessage | undefined;
      if (this.returned.length > 0) message = this.returned.shift();
      else if (this.readyHead < this.ready.length) {
        message = this.ready[this.readyHead];
        this.ready[this.readyHead] = undefined as unknown as StoredMessage;
        this.readyHead += 1;
        if (this.readyHead > 1024 && this.readyHead * 2 > this.ready.length) {
          this.ready = this.ready.slice(this.readyHead);
          this.readyHead = 0;
        }
      } else return undefined;
      if (!message || message.state !== "active") continue;
      if (message.expiresAt <= now) {
        expire(message);
        continue;
      }
      return message;
    }
  }

  /** Expires (by `expire`) every message past its time to live, drops stale entries; returns the next expiry. */
  expireDue(now: number, expire: (message: StoredMessage) => void): number {
    let earliest = Infinity;
    const keep: StoredMessage[] = [];
    for (let i = this.readyHead; i < this.ready.length; i++) {
      const message = this.ready[i]!;
      if (message.state !== "active") continue;
      if (message.expiresAt <= now) expire(message);
      else {
        keep.push(message);
        earliest = Math.min(earliest, message.expiresAt);
      }
    }
    this.ready = keep;
    this.readyHead = 0;
    this.returned = this.returned.filter((message) => {
      if (message.state !== "active") return false;
      if (message.expiresAt <= now) {
        expire(message);
        return false;
      }
      earliest = Math.min(earliest, message.expiresAt);
      return true;
    });
    return earliest;
  }
}
