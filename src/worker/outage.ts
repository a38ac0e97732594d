import { context, ROOT_CONTEXT } from "@opentelemetry/api";
import type { QueueReceiver } from "../servicebus/receiver.ts";
import type { Logger } from "../telemetry/logger.ts";
import type { WorkerMetrics } from "../telemetry/metrics.ts";
import type { WorkerStats } from "./worker-types.ts";

export interface OutagePauseOptions {
  /** The receiver to pause and resume; read late, since the receiver is built after the loop that enters outages. */
  readonly receiver: () => QueueReceiver;
  /** One bounded database probe; it throws while the database does not answer. */
  readonly probe: () => Promise<void>;
  readonly isStopping: () => boolean;
  readonly logger: Logger;
  readonly stats: WorkerStats;
  readonly telemetry: WorkerMetrics;
  readonly backoffMinMs: number;
  readonly backoffMaxMs: number;
  readonly gracePeriodMs: number;
}

/**
 * The worker's pause on a database outage: it stops taking messages, probes the database with backoff, and
 * resumes when it answers, so healthy messages are not burned into the dead-letter queue by repeated abandons.
 */
export class OutagePause {
  private pausedNow = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  // Settles with true when the current outage is over, false when the worker stops first.
  private recovered: Promise<boolean> = Promise.resolve(true);
  private endRecovery: (recovered: boolean) => void = () => undefined;

  private readonly o: OutagePauseOptions;

  constructor(options: OutagePauseOptions) {
    this.o = options;
  }

  get paused(): boolean {
    return this.pausedNow;
  }

  /** What a message waiting on the database awaits: true once it answers again, false if the worker stops first. */
  get recovery(): Promise<boolean> {
    return this.recovered;
  }

  enter(): void {
    if (this.pausedNow || this.o.isStopping()) return;
    this.pausedNow = true;
    this.recovered = new Promise<boolean>((resolve) => (this.endRecovery = resolve));
    this.o.stats.outages += 1;
    this.o.logger.warn("database unreachable: receiving paused until it answers");
    // Outside the message's span that noticed the outage: the pause outlives it, and its probes are their own.
    this.loop = context
      .with(ROOT_CONTEXT, () => this.run())
      .catch((error: unknown) => this.o.logger.error("outage loop failed", { error }));
  }

  /** Ends a pause in progress on stop: its wait is cut short and its loop awaited. */
  async stop(): Promise<void> {
    this.wake?.();
    await this.loop;
  }

  private async run(): Promise<void> {
    const began = Date.now();
    // Stop taking messages; the link stays, so messages waiting for the database keep their locks.
    await this.o.receiver().pause();
    await this.probeUntilAnswered();
    const stopping = this.o.isStopping();
    this.endRecovery(!stopping);
    if (stopping) return;
    // The waiting messages retry and settle on the old link; then it closes and a new subscription starts.
    await this.o.receiver().detach(this.o.gracePeriodMs);
    this.o.telemetry.recordOutagePause(Date.now() - began);
    this.o.logger.info("database answers again: receiving resumed", { pausedMs: Date.now() - began });
    this.pausedNow = false;
    if (!this.o.isStopping()) this.o.receiver().start();
  }

  private async probeUntilAnswered(): Promise<void> {
    let wait = this.o.backoffMinMs;
    while (!this.o.isStopping()) {
      await this.sleep(wait);
      if (this.o.isStopping()) return;
      try {
        await this.o.probe();
        return;
      } catch (error) {
        wait = Math.min(wait * 2, this.o.backoffMaxMs);
        this.o.logger.info("database still unreachable", { nextProbeMs: wait, error });
      }
    }
  }

  private async sleep(ms: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.wake = undefined;
  }
}
