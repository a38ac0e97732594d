/**
 * How fast retention deletes (issue 41, item 5): a chosen multiple of the inbox's own insert rate, spread evenly
 * over the pass in short batches, so it keeps ahead of the markers that come of age without taking the database
 * from the worker in runs. A fixed pause cannot do both: a fast server deletes in bursts, a slow one falls behind.
 */
export interface CleanupPace {
  /** Deletes a second as a multiple of the insert rate measured (SBINBOX_CLEANUP_RATE_MULTIPLE). */
  readonly multiple: number;
  /** The fewest deletes a second, whatever the insert rate (an idle inbox still empties): SBINBOX_CLEANUP_MIN_RATE. */
  readonly minPerSecond: number;
}

/** Defaults chosen by bench:retention (docs/inbox.md, "Does retention keep up?"). */
export const DEFAULT_CLEANUP_PACE: CleanupPace = { multiple: 4, minPerSecond: 1000 };

/**
 * Rows a paced batch reads by the key (SBINBOX_CLEANUP_BATCH_ROWS): short statements, short locks, the deletes
 * spread thin between the worker's transactions (bench:retention chose it).
 */
export const DEFAULT_PACED_BATCH_ROWS = 500;

/** Checks a pace given in code (the settings are checked by the config's schema with the same bounds). */
export function checkPace(pace: CleanupPace): CleanupPace {
  if (!Number.isFinite(pace.multiple) || pace.multiple < 1)
    throw new RangeError(`pace.multiple must be a number of at least 1, got ${pace.multiple}`);
  if (!Number.isFinite(pace.minPerSecond) || pace.minPerSecond < 1)
    throw new RangeError(`pace.minPerSecond must be a number of at least 1, got ${pace.minPerSecond}`);
  return pace;
}

/**
 * The inbox's insert rate, from how far its primary key's highest Id moves over time. Every insert draws an Id,
 * whoever makes it (every worker, every consumer of the table), which is what retention must keep up with. An Id
 * drawn and not kept (a rolled-back insert, a batch's duplicate on PostgreSQL, SQL Server's identity cache after a
 * restart) counts too: the rate errs high, so cleanup errs fast.
 */
export class ArrivalMeter {
  private readonly samples: { at: number; high: bigint }[] = [];
  /** The rate is taken over about this long (the samples older are dropped but for one). */
  private readonly windowMs: number;
  /** Shorter than this, the rate is unknown: a few ms of Ids say little. */
  private readonly minSpanMs: number;

  constructor(windowMs = 30_000, minSpanMs = 1_000) {
    this.windowMs = windowMs;
    this.minSpanMs = minSpanMs;
  }

  observe(high: bigint, at: number): void {
    const newest = this.samples.at(-1);
    if (newest !== undefined && high < newest.high) {
      // Below where the window began: the identity started again (a reseed), what came before says nothing now.
      // A smaller fall is the newest rows deleted (a swept or released claim): the key did not go back, so the
      // sample is left out and the rate stands.
      if (high < this.samples[0]!.high) this.samples.length = 0;
      else return;
    }
    this.samples.push({ at, high });
    while (this.samples.length > 2 && this.samples[1]!.at <= at - this.windowMs) this.samples.shift();
  }

  /** Inserts a second over the window, or undefined before a span of minSpanMs has been seen. */
  perSecond(): number | undefined {
    const oldest = this.samples[0];
    const newest = this.samples.at(-1);
    if (oldest === undefined || newest === undefined || newest.at - oldest.at < this.minSpanMs)
      return undefined;
    return (Number(newest.high - oldest.high) * 1000) / (newest.at - oldest.at);
  }
}

/** The most time behind its slots a pass makes up by batches back to back. */
export const CATCH_UP_MS = 1000;

/** What the pace decided after one batch, for the caller's report. */
export interface PaceStep {
  /** The insert rate measured, undefined while unknown (the pass then goes at minPerSecond). */
  readonly insertPerSecond: number | undefined;
  /** The deletes a second aimed at. */
  readonly targetPerSecond: number;
  /** The wait before the next batch. */
  readonly waitMs: number;
}

/**
 * Spaces the batches of one pass so that deletes come at the target rate: each batch's deletes earn it a slot of
 * deleted / target seconds, the next batch starts when the slots so far are used up. A batch slower than its slot
 * leaves no wait (the server is the limit: the pass then runs flat out). Time lost to a slow batch or a late timer
 * (a connection's first statement on some servers takes half a second) is made up by batches back to back, but
 * never more than CATCH_UP_MS of it, so a long stall does not end in a long burst.
 */
export class PassPacer {
  private nextAt: number;
  private readonly pace: CleanupPace;
  private readonly meter: ArrivalMeter;

  constructor(pace: CleanupPace, meter: ArrivalMeter, began: number) {
    this.pace = pace;
    this.meter = meter;
    this.nextAt = began;
  }

  afterBatch(deleted: number, at: number): PaceStep {
    const insertPerSecond = this.meter.perSecond();
    const targetPerSecond = Math.max(this.pace.minPerSecond, this.pace.multiple * (insertPerSecond ?? 0));
    const slotMs = (deleted * 1000) / targetPerSecond;
    this.nextAt = Math.max(this.nextAt + slotMs, at - CATCH_UP_MS);
    return { insertPerSecond, targetPerSecond, waitMs: Math.max(0, this.nextAt - at) };
  }
}
