import type { Disposition } from "../telemetry/names.ts";

/**
 * Issues settlements so that rhea 3.0.x cannot merge two of them into one disposition frame.
 *
 * rhea's session `write_dispositions` collects every delivery updated before its next `process.nextTick` flush and
 * folds consecutive delivery ids into ranges. A range that so far holds a single delivery absorbs the next one
 * whatever its outcome (the comparison is guarded by `first !== last`), and the whole range is sent with the first
 * delivery's state. So `complete(a)` + `deadLetter(b)` in one flush completes b; `deadLetter(a)` + `complete(b)`
 * dead-letters b; two dead-letters carry the first one's reason. Ranges of two or more compare outcomes, and only
 * `accepted` states are ever batched together.
 *
 * The rule this scheduler keeps: one flush carries either any number of completes, or exactly one other
 * settlement, never a mix. The SDK's settle calls reach `delivery.update` synchronously, so issuing a round in one
 * synchronous loop and waiting a macrotask (`setImmediate`, which runs after every pending nextTick) before the
 * next round keeps rounds in separate flushes.
 */
export type Issue = () => Promise<void>;

interface Pending {
  readonly disposition: Disposition;
  readonly issue: Issue;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

export interface SettlementSchedulerOptions {
  /** Waits for the next macrotask; injectable for tests. */
  nextMacrotask?: (fn: () => void) => void;
}

export class SettlementScheduler {
  private readonly queue: Pending[] = [];
  private scheduled = false;
  private readonly nextMacrotask: (fn: () => void) => void;
  /** Rounds issued so far; a test reads it to see how settlements were grouped. */
  rounds = 0;

  constructor(options: SettlementSchedulerOptions = {}) {
    this.nextMacrotask = options.nextMacrotask ?? ((fn) => setImmediate(fn));
  }

  /** Queues a settlement; `issue` must call the SDK's settle method. Resolves or rejects as that call does. */
  settle(disposition: Disposition, issue: Issue): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ disposition, issue, resolve, reject });
      this.schedule();
    });
  }

  get pending(): number {
    return this.queue.length;
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    // Starting on a macrotask also separates the first round from settlements issued by anyone else this tick.
    this.nextMacrotask(() => this.round());
  }

  private round(): void {
    this.scheduled = false;
    const head = this.queue[0];
    if (!head) return;
    let batch: Pending[];
    if (head.disposition === "complete") {
      batch = this.queue.filter((p) => p.disposition === "complete");
      const rest = this.queue.filter((p) => p.disposition !== "complete");
      this.queue.length = 0;
      this.queue.push(...rest);
    } else {
      batch = [this.queue.shift()!];
    }
    this.rounds += 1;
    for (const p of batch) {
      let promise: Promise<void>;
      try {
        promise = p.issue();
      } catch (error) {
        promise = Promise.reject(error instanceof Error ? error : new Error(String(error)));
      }
      promise.then(p.resolve, p.reject);
    }
    if (this.queue.length > 0) this.schedule();
  }
}
