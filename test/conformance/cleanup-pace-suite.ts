import assert from "node:assert/strict";
import type { Backend, BackendDatabase } from "./backends.ts";
import { scalar } from "./backends.ts";
import { disposingAfter } from "./guards.ts";
import type { CleanupBatch } from "../../src/inbox/cleanup.ts";
import type { InboxStore } from "../../src/inbox/store.ts";

export const CONSUMER = "pace";
const RETENTION_MS = 3_600_000;
const BACKLOG = 3000;
/**
 * The writer's aim; what counts is what it inserts, which the pace has to measure for itself. Lower on SQL Server:
 * the TDS server beside the tests deletes batches of 100 unpaced at only some 800 a second under the writer, and
 * the unpaced pass must be seen to go well past the pace.
 */
const WRITER_PER_SECOND = { postgres: 150, sqlserver: 50 } as const;

/** `count` markers two hours old, in one statement, before any the writer inserts (the lowest Ids). */
export function insertBacklog(db: BackendDatabase, count: number): Promise<unknown> {
  if (db.target.kind === "postgres") {
    const q = `"${db.schema ?? "public"}"`;
    return db.raw.query(
      `INSERT INTO ${q}."Inbox" ("ConsumerId", "MessageKey", "ReceivedSec")
       SELECT (SELECT "Id" FROM ${q}."InboxConsumer" WHERE "Name" = $1), decode(md5('old-' || g::text), 'hex'),
         floor(extract(epoch FROM now()) - 1577836800)::integer - 7200
       FROM generate_series(1, $2::integer) AS g`,
      [CONSUMER, count],
    );
  }
  const q = `[${db.schema ?? "dbo"}]`;
  return db.raw.query(
    `INSERT INTO ${q}.Inbox (ConsumerId, MessageKey, ReceivedSec)
     SELECT TOP (@p2) (SELECT Id FROM ${q}.InboxConsumer WHERE Name = @p1), CAST(NEWID() AS binary(16)),
       DATEDIFF(second, '20200101', SYSUTCDATETIME()) - 7200
     FROM sys.all_columns AS a CROSS JOIN sys.all_columns AS b`,
    [CONSUMER, count],
  );
}

/** Messages at about `perSecond` through the store, four at once, until stopped; counts what committed. */
function startWriter(store: InboxStore, perSecond: number): { inserted(): number; stop(): Promise<void> } {
  let inserted = 0;
  let running = true;
  const began = performance.now();
  const lane = async (lane: number) => {
    for (let i = 0; running; i += 1) {
      const due = ((performance.now() - began) / 1000) * perSecond;
      if (inserted >= due) {
        await new Promise((r) => setTimeout(r, 5));
        continue;
      }
      const outcome = await store.process({ messageId: `new-${lane}-${i}`, consumer: CONSUMER }, () =>
        Promise.resolve(),
      );
      assert.equal(outcome.kind, "committed");
      inserted += 1;
    }
  };
  const lanes = Promise.all([0, 1, 2, 3].map(lane));
  return {
    inserted: () => inserted,
    stop: async () => {
      running = false;
      await lanes;
    },
  };
}

/** One pass over the backlog while the writer runs: the deletes and inserts once the pace knew the insert rate. */
async function pacedPass(store: InboxStore, writer: ReturnType<typeof startWriter>, multiple: number) {
  let insertedAtKnown: number | undefined;
  let knownAt = 0;
  let deletedKnown = 0;
  let unknownBatches = 0;
  const rates: number[] = [];
  const deleted = await store.cleanup(RETENTION_MS, 100, {
    pace: { multiple, minPerSecond: 200 },
    onBatch: (n: number, batch?: CleanupBatch) => {
      const rate = batch?.pace?.insertPerSecond;
      if (rate === undefined) {
        unknownBatches += 1;
        return;
      }
      rates.push(rate);
      // From the first batch with a rate on: the inserts since then against the deletes after it.
      if (insertedAtKnown === undefined) {
        insertedAtKnown = writer.inserted();
        knownAt = performance.now();
      } else deletedKnown += n;
    },
  });
  const insertedKnown = writer.inserted() - (insertedAtKnown ?? writer.inserted());
  return {
    deleted,
    deletedKnown,
    insertedKnown,
    /** The writer's inserts a second over the same time. */
    insertedPerSecond: (insertedKnown * 1000) / Math.max(1, performance.now() - knownAt),
    unknownBatches,
    rates,
  };
}

/**
 * The retention pass's pace on the real database (issue 41, item 5): with a writer inserting, a backlog is deleted
 * at about the pace's multiple of the inserts counted meanwhile, not flat out, and the insert rate it measures from
 * the key is the writer's. Counts, not durations: the writer's own rate is whatever this machine gives it.
 */
/**
 * A database of its own with BACKLOG old markers (the lowest Ids, as time makes them), the writer running while
 * `pass` runs; afterwards only the writer's markers are left.
 */
async function withWriter<T>(
  backend: Backend,
  label: string,
  pass: (store: InboxStore, writer: ReturnType<typeof startWriter>) => Promise<T>,
): Promise<T> {
  const db = await backend.database(label);
  return disposingAfter(db, async () => {
    const store = db.createStore({ preCheck: false });
    await store.migrate();
    await db.raw.query(db.raw.statements.registerConsumer, [CONSUMER]);
    await insertBacklog(db, BACKLOG);
    const writer = startWriter(store, WRITER_PER_SECOND[backend.dialect]);
    let result: T;
    try {
      result = await pass(store, writer);
    } finally {
      await writer.stop();
    }
    assert.equal(
      await scalar(db.raw, db.sql.countAllMarkers),
      writer.inserted(),
      "the writer's markers, all kept",
    );
    return result;
  });
}

export function cleanupPaceConformance(backend: Backend): void {
  describe(`conformance cleanup pace: ${backend.name}`, function () {
    this.timeout(120_000);

    it("a backlog goes at >= 3 x the inserts while the writer runs (pace 4 x), and no faster than 8 x; unpaced, far faster", async function () {
      const paced = await withWriter(backend, `pace_${backend.dialect}`, (store, writer) =>
        pacedPass(store, writer, 4),
      );
      // The same backlog and writer without a pace: what the pace holds back.
      const flatOut = await withWriter(backend, `flat_${backend.dialect}`, async (store, writer) => {
        const before = writer.inserted();
        const deleted = await store.cleanup(RETENTION_MS, 100);
        return { deleted, inserted: writer.inserted() - before };
      });
      assert.equal(paced.deleted, BACKLOG, "every old marker");
      assert.equal(flatOut.deleted, BACKLOG);
      // The rate is known after about a second of Ids: most of the pass goes at the rate measured.
      assert.ok(
        paced.deletedKnown >= BACKLOG / 2,
        `${paced.deletedKnown} deleted once the rate was known, after ${paced.unknownBatches} batches`,
      );
      const ratio = paced.deletedKnown / Math.max(1, paced.insertedKnown);
      const detail = `${paced.deletedKnown} deleted against ${paced.insertedKnown} inserted (${ratio.toFixed(2)} x)`;
      assert.ok(paced.insertedKnown >= 50, `the writer ran through the pass: ${detail}`);
      assert.ok(ratio >= 3, `paced at 4 x, at least 3 x: ${detail}`);
      // The pace reads the rate over up to 30 s, so a writer slowed meanwhile (a loaded machine) is met late: 2 x slack.
      assert.ok(ratio <= 8, `paced at 4 x, not flat out: ${detail}`);
      const flatRatio = flatOut.deleted / Math.max(1, flatOut.inserted);
      assert.ok(flatRatio > 8, `unpaced, far past the pace: ${flatOut.deleted} against ${flatOut.inserted}`);
      // What the pace measured is what the writer did (Ids drawn; no rollbacks here), give or take timing.
      const measured = paced.rates.at(-1)!;
      const actual = paced.insertedPerSecond;
      assert.ok(
        measured >= actual / 2 && measured <= actual * 2,
        `the pace measured ${measured.toFixed(0)} inserts a second, the writer did ${actual.toFixed(0)}`,
      );
    });
  });
}
