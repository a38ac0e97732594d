import type { SqlResult } from "../domain/sql.ts";
import { ArrivalMeter, PassPacer, type CleanupPace, type PaceStep } from "./cleanup-pace.ts";

/** What one cleanup run did: rows deleted, and the Id after which the next run starts. */
export interface CleanupRun {
  readonly deleted: number;
  readonly resumeAfterId: string;
}

/** One batch as its caller hears of it: what it deleted, how long it took, and the wait the pace set after it. */
export interface CleanupBatch {
  readonly durationMs: number;
  readonly waitMs: number;
  /** The pace's reading, when the pass is paced (undefined with a fixed pause or none). */
  readonly pace?: PaceStep;
}

interface RangeRow {
  deleted: number | string;
  last: string | number | null;
  old: number | string;
  firstYoung: string | number | null;
  high: string | number | null;
}

/** How a run spaces its batches: a fixed pause, or the pace measured against the insert rate (pauseMs wins). */
export interface CleanupSpacing {
  readonly pauseMs?: number;
  readonly pace?: CleanupPace;
  /** The insert rate's meter, kept by the store from pass to pass (the first batch then already has a rate). */
  readonly meter?: ArrivalMeter;
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
  run: CleanupSpacing & {
    readonly afterId: string;
    readonly batchSize: number;
    readonly cutoffSec: number;
    readonly onBatch?: (deleted: number, batch: CleanupBatch) => void;
    readonly signal?: AbortSignal;
  },
): Promise<CleanupRun> {
  let after = run.afterId;
  let deleted = 0;
  let firstKept: string | undefined;
  const spacing = spacer(run);
  for (let first = true; ; first = false) {
    const began = performance.now();
    const row = (await db.query<RangeRow>(sql, [after, run.batchSize, run.cutoffSec])).rows[0];
    const ended = performance.now();
    const n = Number(row?.deleted ?? 0);
    deleted += n;
    const wait = spacing(n, row?.high, ended);
    run.onBatch?.(n, { durationMs: ended - began, waitMs: wait.waitMs, pace: wait.pace });
    if (row?.firstYoung !== null && row?.firstYoung !== undefined && firstKept === undefined)
      firstKept = String(BigInt(row.firstYoung) - 1n);
    const last = row?.last;
    // Nothing after `after`: every row is gone. When nothing follows the Id this run started from (a table
    // emptied and its identity started again), the next run starts from the beginning.
    if (last === null || last === undefined)
      return { deleted, resumeAfterId: firstKept ?? (first ? "0" : after) };
    if (Number(row?.old ?? 0) === 0) return { deleted, resumeAfterId: firstKept ?? after };
    after = String(last);
    if (wait.waitMs > 0) await pause(wait.waitMs, run.signal);
    if (run.signal?.aborted === true) return { deleted, resumeAfterId: firstKept ?? after };
  }
}

/** The wait after each batch: the fixed pause when one is given, else the pace's, else none. */
function spacer(
  run: CleanupSpacing,
): (deleted: number, high: RangeRow["high"] | undefined, at: number) => { waitMs: number; pace?: PaceStep } {
  if (run.pauseMs !== undefined) {
    const waitMs = Math.max(0, run.pauseMs);
    return () => ({ waitMs });
  }
  if (run.pace === undefined) return () => ({ waitMs: 0 });
  const meter = run.meter ?? new ArrivalMeter();
  const pacer = new PassPacer(run.pace, meter, performance.now());
  return (deleted, high, at) => {
    if (high !== null && high !== undefined) meter.observe(BigInt(high), at);
    const pace = pacer.afterBatch(deleted, at);
    return { waitMs: pace.waitMs, pace };
  };
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
