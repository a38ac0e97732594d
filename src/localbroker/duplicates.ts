/**
 * Duplicate detection's history for one queue or topic: each MessageId seen within the window
 * (DuplicateDetectionHistoryTimeWindow) before now. Insertion order is expiry order, as every entry lasts the same
 * window, so pruning stops at the first entry still inside it.
 */
export class DuplicateWindow {
  private readonly windowMs: number;
  private readonly until = new Map<string, number>();

  constructor(windowMs: number) {
    this.windowMs = windowMs;
  }

  /** True when `messageIdKey` was seen inside the window (a duplicate, to drop); otherwise records it and is false. */
  seen(messageIdKey: string, now: number): boolean {
    for (const [id, until] of this.until) {
      if (until > now) break;
      this.until.delete(id);
    }
    const until = this.until.get(messageIdKey);
    if (until !== undefined && until > now) return true;
    this.until.set(messageIdKey, now + this.windowMs);
    return false;
  }
}
