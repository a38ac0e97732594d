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
 * short of its multiple shows whether the server was the limit (no waits) or the pace was.
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
  const deleted = await store.cleanup(retentionMs, spacing.batchRows, {
    onBatch: (_deleted, batch) => seen.add(batch),
    pace: spacing.pauseMs === undefined ? spacing.pace : undefined,
    pauseMs: spacing.pauseMs,
    signal,
  });
  const durationMs = performance.now() - began;
  recordCleanupPass({ deleted, batches: seen.batches, durationMs });
  logger.info("inbox cleanup pass", { deleted, ...seen.fields(deleted, durationMs) });
  return deleted;
}

/** What the batches of one pass said, summed for its log line. */
class PassReport {
  batches = 0;
  private statementMs = 0;
  private waitedMs = 0;
  private insertPerSecond: number | undefined;
  private paced = false;

  add(batch: CleanupBatch | undefined): void {
    this.batches += 1;
    if (batch === undefined) return;
    this.statementMs += batch.durationMs;
    this.waitedMs += batch.waitMs;
    if (batch.pace !== undefined) {
      this.paced = true;
      this.insertPerSecond = batch.pace.insertPerSecond ?? this.insertPerSecond;
    }
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
