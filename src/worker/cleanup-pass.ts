import type { CleanupPace } from "../inbox/cleanup-pace.ts";
import type { CleanupBatch } from "../inbox/cleanup.ts";
import type { InboxStore } from "../inbox/store.ts";
import type { Logger } from "../telemetry/logger.ts";
import { recordCleanupPass } from "../telemetry/cleanup-metrics.ts";

/** How the worker's passes space their batches (SBINBOX_CLEANUP_*; docs/configuration.md). */
export interface CleanupSchedule {
  /** Rows a batch reads by the key (the store's default when absent). */
  readonly batchRows?: number;
  /** Deletes at a multiple of the insert rate, batches spaced evenly. */
  readonly pace?: CleanupPace;
  /** A fixed pause between batches instead of the pace. */
  readonly pauseMs?: number;
}

/**
 * One retention pass, reported in the log and the metrics (sbinbox.inbox.cleanup.deleted and .duration) whatever
 * it deleted, so a pass that deletes nothing, or falls behind, shows as plainly as one that keeps up. The log says
 * what the pace measured (the insert rate, the deletes a second against it, the time spent waiting), so a pass
 * short of its multiple shows whether the server was the limit (no waits) or the pace was. A pass skipped because
 * another instance's pass holds the cleanup lock says so (`skipped`); one that fails part-way still reports the rows
 * its batches deleted before the error (`error`), then throws it.
 */
export async function cleanupPass(
  store: InboxStore,
  retentionMs: number,
  logger: Logger,
  schedule?: number | CleanupSchedule,
  signal?: AbortSignal,
): Promise<number> {
  const spacing = typeof schedule === "number" ? { pauseMs: schedule } : (schedule ?? {});
  const began = performance.now();
  const seen = new PassReport();
  try {
    const deleted = await store.cleanup(retentionMs, spacing.batchRows, {
      onBatch: (n, batch) => seen.add(n, batch),
      onSkipped: (reason) => seen.skip(reason),
      pace: spacing.pauseMs === undefined ? spacing.pace : undefined,
      pauseMs: spacing.pauseMs,
      signal,
    });
    seen.report(logger, performance.now() - began, { deleted });
    return deleted;
  } catch (error) {
    seen.report(logger, performance.now() - began, { error });
    throw error;
  }
}

/** What the batches of one pass said, summed for its log line. */
class PassReport {
  batches = 0;
  /** Rows the batches reported deleted: a failed pass's count (a finished one's is the store's answer). */
  private deleted = 0;
  private skipped: string | undefined;
  private statementMs = 0;
  private waitedMs = 0;
  private insertPerSecond: number | undefined;
  private paced = false;

  add(deleted: number, batch: CleanupBatch | undefined): void {
    this.batches += 1;
    this.deleted += deleted;
    if (batch === undefined) return;
    this.statementMs += batch.durationMs;
    this.waitedMs += batch.waitMs;
    if (batch.pace !== undefined) {
      this.paced = true;
      this.insertPerSecond = batch.pace.insertPerSecond ?? this.insertPerSecond;
    }
  }

  skip(reason: string): void {
    this.skipped = reason;
  }

  /** The pass's log line and metric: completed, skipped, or failed with the rows deleted before the error. */
  report(logger: Logger, durationMs: number, end: { deleted: number } | { error: unknown }): void {
    const error = "error" in end ? end.error : undefined;
    const deleted = "deleted" in end ? end.deleted : this.deleted;
    const outcome = "error" in end ? "failed" : this.skipped !== undefined ? "skipped" : "completed";
    recordCleanupPass({ deleted, batches: this.batches, durationMs, outcome, error });
    const fields: Record<string, unknown> = { deleted, ...this.fields(deleted, durationMs) };
    if (this.skipped !== undefined) fields.skipped = this.skipped;
    if (outcome !== "failed") return logger.info("inbox cleanup pass", fields);
    fields.error = error instanceof Error ? error.message : JSON.stringify(error);
    logger.warn("inbox cleanup pass", fields);
  }

  fields(deleted: number, durationMs: number): Record<string, number | string> {
    const perSecond = durationMs > 0 ? Math.round((deleted * 1000) / durationMs) : 0;
    const fields: Record<string, number | string> = {
      batches: this.batches,
      durationMs: Math.round(durationMs),
      perSecond,
      statementMs: Math.round(this.statementMs),
      waitedMs: Math.round(this.waitedMs),
    };
    if (!this.paced) return fields;
    fields.insertPerSecond = Math.round(this.insertPerSecond ?? 0);
    // Deletes a second over the insert rate: the pace aims at its multiple while old markers remain.
    if (this.insertPerSecond !== undefined && this.insertPerSecond > 0)
      fields.ofInsertRate = Number((perSecond / this.insertPerSecond).toFixed(2));
    return fields;
  }
}
