import type { InboxStore } from "../inbox/store.ts";
import type { Logger } from "../telemetry/logger.ts";
import { recordCleanupPass } from "../telemetry/cleanup-metrics.ts";

/**
 * One retention pass, reported in the log and the metrics (sbinbox.inbox.cleanup.deleted and .duration) whatever
 * it deleted, so a pass that deletes nothing, or falls behind, shows as plainly as one that keeps up.
 */
export async function cleanupPass(
  store: InboxStore,
  retentionMs: number,
  logger: Logger,
  pauseMs?: number,
  signal?: AbortSignal,
): Promise<number> {
  const began = performance.now();
  let batches = 0;
  const deleted = await store.cleanup(retentionMs, undefined, {
    onBatch: () => (batches += 1),
    pauseMs,
    signal,
  });
  const durationMs = performance.now() - began;
  recordCleanupPass({ deleted, batches, durationMs });
  const perSecond = durationMs > 0 ? Math.round((deleted * 1000) / durationMs) : 0;
  logger.info("inbox cleanup pass", { deleted, batches, durationMs: Math.round(durationMs), perSecond });
  return deleted;
}
