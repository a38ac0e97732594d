/** One failed attempt and what the worker did about it. */
export interface Retry {
  /** The attempt that failed (1 for the first). */
  readonly attempt: number;
  /** "waited": retried in place under the lock; "scheduled": by a scheduled copy; "abandoned": by redelivery. */
  readonly how: "waited" | "scheduled" | "abandoned";
  /** How long until the next attempt (0 for an abandon, which the broker redelivers at once). */
  readonly delayMs: number;
  /** The error class the retry policy judged it by: transient, permanent, unavailable. */
  readonly errorClass?: string;
  /** The failure's message. */
  readonly error?: string;
}

interface Common {
  /** The inbox key: the MessageId the message was published with (a retry copy's original). */
  readonly messageId: string;
  /** Attempts made, the last one included. */
  readonly attempts: number;
  /** The failed attempts before the last one, in order. */
  readonly retries: readonly Retry[];
  /** The message type, once decoded. */
  readonly messageType?: string;
}

/**
 * What became of one message: its effect committed, or found already committed (a redelivery, a resend past
 * the duplicate-detection window), or it was dead-lettered with a reason; or the broker's duplicate detection
 * dropped it on arrival (a resend inside the window), so the worker never saw it.
 */
export type Outcome =
  | (Common & { readonly status: "committed" })
  | (Common & { readonly status: "duplicate" })
  | (Common & { readonly status: "dead-lettered"; readonly reason: string; readonly description: string })
  | {
      readonly status: "dropped-by-broker";
      readonly messageId: string;
      readonly attempts: 0;
      readonly retries: readonly [];
    };

/** Which of the worker's decisions end a message's story here; the others are retries on the way. */
export interface Settled {
  readonly disposition: string;
  readonly outcome: string;
  readonly reason?: string;
  readonly description?: string;
  readonly errorClass?: string;
  readonly error?: unknown;
  readonly messageType?: string;
  readonly copy?: { readonly attempt: number; readonly enqueueAt: Date };
}

/**
 * Collects the worker's decisions per inbox key and hands each final one out once, in order: `next` waits for
 * the first final outcome not handed out yet. Fed by the worker's own hooks (beforeSettle, its retry log lines)
 * and the broker's duplicate-drop listener, so a test waits on events, never on a poll.
 */
export class OutcomeTracker {
  private readonly retries = new Map<string, Retry[]>();
  /** Waits in place, logged under the delivered message's own id before its settlement names its key. */
  private readonly waits = new Map<string, Retry[]>();
  private readonly finals = new Map<string, Outcome[]>();
  private readonly waiting = new Map<string, ((outcome: Outcome) => void)[]>();
  /** The inbox key of each delivered id the worker has settled, for a copy the broker then dead-letters. */
  private readonly keys = new Map<string, string>();
  private readonly timers = new Map<NodeJS.Timeout, () => void>();
  private closed = false;

  /** A retry in place, by the delivered message's id (a copy's own id). */
  waited(deliveredId: string, retry: Retry): void {
    const list = this.waits.get(deliveredId) ?? [];
    list.push(retry);
    this.waits.set(deliveredId, list);
  }

  settled(inboxKey: string, deliveredId: string, decision: Settled): void {
    this.keys.set(deliveredId, inboxKey);
    const retries = this.retries.get(inboxKey) ?? [];
    retries.push(...(this.waits.get(deliveredId) ?? []));
    this.waits.delete(deliveredId);
    const attempt = retries.length + 1;
    const error = errorText(decision.error);
    if (decision.disposition === "reschedule" || decision.disposition === "abandon") {
      const delayMs =
        decision.disposition === "reschedule" && decision.copy
          ? Math.max(0, decision.copy.enqueueAt.getTime() - Date.now())
          : 0;
      retries.push({
        attempt,
        how: decision.disposition === "reschedule" ? "scheduled" : "abandoned",
        delayMs,
        errorClass: decision.errorClass,
        error,
      });
      this.retries.set(inboxKey, retries);
      return;
    }
    this.retries.delete(inboxKey);
    const common = { messageId: inboxKey, attempts: attempt, retries, messageType: decision.messageType };
    if (decision.disposition === "dead_letter") {
      this.final({
        ...common,
        status: "dead-lettered",
        reason: decision.reason ?? "",
        description: decision.description ?? "",
      });
    } else {
      this.final({ ...common, status: decision.outcome === "duplicate" ? "duplicate" : "committed" });
    }
  }

  /**
   * A message the broker dead-lettered itself (its delivery count reached, its time to live over): the worker never
   * settled that delivery, so this is its final outcome, with the failed attempts the worker saw before.
   */
  deadLetteredByBroker(deliveredId: string, reason: string, description: string): void {
    const inboxKey = this.keys.get(deliveredId) ?? deliveredId;
    const retries = this.retries.get(inboxKey) ?? [];
    retries.push(...(this.waits.get(deliveredId) ?? []));
    this.waits.delete(deliveredId);
    this.retries.delete(inboxKey);
    this.final({
      status: "dead-lettered",
      messageId: inboxKey,
      attempts: retries.length,
      retries,
      reason,
      description,
    });
  }

  /** Ends every wait: `stop` rejects what is still awaited rather than leave a timer holding the process open. */
  close(): void {
    this.closed = true;
    for (const [timer, reject] of this.timers) {
      clearTimeout(timer);
      reject();
    }
    this.timers.clear();
  }

  dropped(messageId: string): void {
    this.final({ status: "dropped-by-broker", messageId, attempts: 0, retries: [] });
  }

  /** The next final outcome of `messageId` not handed out yet, once there is one. */
  next(messageId: string, timeoutMs: number): Promise<Outcome> {
    const ready = this.finals.get(messageId);
    if (ready && ready.length > 0) return Promise.resolve(ready.shift()!);
    if (this.closed)
      return Promise.reject(new Error(`harness: stopped before message ${messageId} had an outcome`));
    return new Promise<Outcome>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        const list = this.waiting.get(messageId) ?? [];
        this.waiting.set(
          messageId,
          list.filter((w) => w !== settle),
        );
        const sofar = this.retries.get(messageId) ?? [];
        reject(
          new Error(
            `harness: no outcome for message ${messageId} within ${timeoutMs} ms` +
              (sofar.length > 0
                ? `; failed attempts so far: ${JSON.stringify(sofar)}`
                : "; the worker has not settled it"),
          ),
        );
      }, timeoutMs);
      // A forgotten `stop` must not keep the test process alive on this timer.
      timer.unref();
      this.timers.set(timer, () =>
        reject(new Error(`harness: stopped before message ${messageId} had an outcome`)),
      );
      const settle = (outcome: Outcome): void => {
        clearTimeout(timer);
        this.timers.delete(timer);
        resolve(outcome);
      };
      const list = this.waiting.get(messageId) ?? [];
      list.push(settle);
      this.waiting.set(messageId, list);
    });
  }

  private final(outcome: Outcome): void {
    const waiter = this.waiting.get(outcome.messageId)?.shift();
    if (waiter) {
      waiter(outcome);
      return;
    }
    const list = this.finals.get(outcome.messageId) ?? [];
    list.push(outcome);
    this.finals.set(outcome.messageId, list);
  }
}

/** A failure's message, for a test's assertion. */
export function errorText(error: unknown): string | undefined {
  if (error === undefined) return undefined;
  return error instanceof Error ? error.message : typeof error === "string" ? error : JSON.stringify(error);
}
