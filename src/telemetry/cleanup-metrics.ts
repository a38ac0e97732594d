import { perMeterProvider } from "./meter-cache.ts";
import { Attr, errorType, Metric } from "./names.ts";

/** One retention pass of the inbox: what it deleted, in how many batches, in how long. */
export interface CleanupPass {
  readonly deleted: number;
  readonly batches: number;
  readonly durationMs: number;
  /**
   * How it ended: `completed`; `skipped` (another instance's pass held the cleanup lock, nothing deleted); or
   * `failed` part-way (`deleted` is what its batches deleted before the error).
   */
  readonly outcome: "completed" | "skipped" | "failed";
  /** The error a failed pass ended with (its error.type attribute). */
  readonly error?: unknown;
}

// A pass takes milliseconds when it keeps up and grows when it falls behind; the buckets span both.
const PASS_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

const instruments = perMeterProvider((meter) => ({
  deleted: meter.createCounter(Metric.cleanupDeleted, {
    description: "Inbox markers deleted by retention, older than SBINBOX_RETENTION_HOURS.",
    unit: "{marker}",
  }),
  duration: meter.createHistogram(Metric.cleanupDuration, {
    description: "Duration of one inbox retention pass.",
    unit: "s",
    advice: { explicitBucketBoundaries: PASS_BUCKETS },
  }),
}));

/**
 * Records a pass on the global meter provider: the markers deleted (a counter, so its rate is the deletes a second
 * to set against the insert rate) and the pass's duration (a histogram; a pass that nears the cleanup interval is
 * falling behind), both with the pass's outcome (sbinbox.outcome: completed, skipped or failed).
 */
export function recordCleanupPass(pass: CleanupPass): void {
  const current = instruments();
  const attributes = {
    [Attr.outcome]: pass.outcome,
    ...(pass.outcome === "failed" ? { [Attr.errorType]: errorType(pass.error) } : {}),
  };
  current.deleted.add(pass.deleted, attributes);
  current.duration.record(pass.durationMs / 1000, attributes);
}
