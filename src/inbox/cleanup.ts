import type { SqlResult } from "../domain/sql.ts";

/** What one cleanup run did: rows deleted, and the Id after which the next run starts. */
export interface CleanupRun {
  readonly deleted: number;
  readonly resumeAfterId: string;
}

interface RangeRow {
  deleted: number | string;
  last: string | number | null;
  old: number | string;
  firstYoung: string | number | null;
}

/**
 * Retention by ranges of the primary (clustered) key: each batch takes the next `batchSize` rows by Id and deletes
 * those older than the cutoff, so a batch reads one run of adjacent key pages instead of walking a time index
 * (issue 41, item 5). Ids are drawn in time order, give or take a transaction's length: the first range without an
 * old row ends the run. The next run starts at the first row this one kept, so a young row among old ones (a long
 * transaction's) is looked at again until it is old.
 */
export async function cleanupRanges(
  db: { query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> },
  sql: string,
  run: {
    readonly afterId: string;
    readonly batchSize: number;
    readonly cutoffSec: number;
    readonly onBatch?: (deleted: number) => void;
    readonly pauseMs?: number;
    readonly signal?: AbortSignal;
  },
): Promise<CleanupRun> {
  let after = run.afterId;
  let deleted = 0;
  let firstKept: string | undefined;
  for (let first = true; ; first = false) {
    const row = (await db.query<RangeRow>(sql, [after, run.batchSize, run.cutoffSec])).rows[0];
    const n = Number(row?.deleted ?? 0);
    deleted += n;
    run.onBatch?.(n);
    if (row?.firstYoung !== null && row?.firstYoung !== undefined && firstKept === undefined)
      firstKept = String(BigInt(row.firstYoung) - 1n);
    const last = row?.last;
    // Nothing after `after`: every row is gone. When nothing follows the Id this run started from (a table
    // emptied and its identity started again), the next run starts from the beginning.
    if (last === null || last === undefined)
      return { deleted, resumeAfterId: firstKept ?? (first ? "0" : after) };
    if (Number(row?.old ?? 0) === 0) return { deleted, resumeAfterId: firstKept ?? after };
    after = String(last);
    if (run.pauseMs !== undefined && run.pauseMs > 0) await pause(run.pauseMs, run.signal);
    if (run.signal?.aborted === true) return { deleted, resumeAfterId: firstKept ?? after };
  }
}

/** Waits `ms`, or less when `signal` aborts meanwhile (a stopping worker does not wait out a pause). */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (signal?.aborted === true) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
