// The database on loopback (through the proxy at 0 delay, which counts): the worker per message and batched at
// each concurrency against the database, broker and naive rows, in rounds taking turns; and the latency rows.
import { median } from "../median.ts";
import { databaseCeiling, naive, receiveLoop } from "./ceilings.ts";
import {
  CONCURRENCY,
  MESSAGES,
  ROUNDS,
  batchSizeAt,
  drainWithWorker,
  freshEvents,
  latency,
  type Drain,
  type Harness,
} from "./harness.ts";

/** Medians of drains, field by field. */
export function medianDrain(runs: readonly Drain[]): Drain {
  const m = (f: (d: Drain) => number) => median(runs.map(f));
  return {
    rate: m((d) => d.rate),
    cpuUs: m((d) => d.cpuUs),
    roundTrips: m((d) => d.roundTrips),
    commits: m((d) => d.commits),
  };
}

export const range = (xs: readonly Drain[]) =>
  `${Math.min(...xs.map((x) => x.rate)).toFixed(0)}-${Math.max(...xs.map((x) => x.rate)).toFixed(0)}`;

export interface LoopbackRow {
  readonly c: number;
  readonly batch: number;
  readonly e2e: Drain;
  readonly batched: Drain;
  readonly db: Drain;
  readonly db6: Drain;
  readonly naive: Drain;
  readonly dup: Drain;
  readonly batchedDup: Drain;
  readonly broker: Drain;
  readonly p50: number;
  readonly p99: number;
  readonly batchedP50: number;
  readonly batchedP99: number;
  readonly spread: string;
}

export async function loopbackRows(h: Harness): Promise<LoopbackRow[]> {
  const rows: LoopbackRow[] = [];
  for (const c of CONCURRENCY) {
    process.stdout.write(`concurrency ${c} ...\n`);
    // The rows that the targets compare run in several rounds, taking turns, and the median is reported: the
    // machine is shared, and one noisy stretch should not decide a ratio.
    const b = batchSizeAt(c);
    const runs = {
      e2e: [] as Drain[],
      db: [] as Drain[],
      db6: [] as Drain[],
      naive: [] as Drain[],
      dup: [] as Drain[],
      batched: [] as Drain[],
      batchedDup: [] as Drain[],
    };
    for (let round = 0; round < ROUNDS; round += 1) {
      const steps = [
        async () => {
          const fresh = freshEvents(MESSAGES);
          runs.e2e.push(await drainWithWorker(h, c, fresh, "committed"));
          runs.dup.push(await drainWithWorker(h, c, fresh, "duplicate"));
        },
        async () => {
          const fresh = freshEvents(MESSAGES);
          runs.batched.push(await drainWithWorker(h, c, fresh, "committed", b));
          runs.batchedDup.push(await drainWithWorker(h, c, fresh, "duplicate", b));
        },
        async () => void runs.db.push(await databaseCeiling(h, c, MESSAGES)),
        async () => void runs.db6.push(await databaseCeiling(h, c, MESSAGES, true)),
        async () => void runs.naive.push(await naive(h, c, MESSAGES)),
      ];
      for (const step of round % 2 === 0 ? steps : steps.reverse()) await step();
    }
    const e2e = medianDrain(runs.e2e);
    // At 30% of the single path's rate, so both rows carry the same load.
    const lat = await latency(h, c, e2e.rate * 0.3);
    const batchedLat = await latency(h, c, e2e.rate * 0.3, b);
    const broker = await receiveLoop(h, c, MESSAGES, () => Promise.resolve());
    rows.push({
      c,
      batch: b,
      e2e,
      batched: medianDrain(runs.batched),
      db: medianDrain(runs.db),
      db6: medianDrain(runs.db6),
      naive: medianDrain(runs.naive),
      dup: medianDrain(runs.dup),
      batchedDup: medianDrain(runs.batchedDup),
      broker,
      p50: lat.p50,
      p99: lat.p99,
      batchedP50: batchedLat.p50,
      batchedP99: batchedLat.p99,
      spread:
        `  conc ${c}: e2e ${range(runs.e2e)}, batched ${range(runs.batched)}, db ${range(runs.db)}, ` +
        `db6 ${range(runs.db6)}, naive ${range(runs.naive)}, dup ${range(runs.dup)}, ` +
        `batched dup ${range(runs.batchedDup)}`,
    });
  }
  return rows;
}

const f0 = (x: number) => x.toFixed(0);
const f1 = (x: number) => x.toFixed(1);
const f2 = (x: number) => x.toFixed(2);

export function singleTable(rows: readonly LoopbackRow[]): { header: string[]; rows: string[][] } {
  return {
    header: [
      "conc",
      "e2e/s",
      "p50 ms",
      "p99 ms",
      "db ceil/s",
      "db6 ceil/s",
      "broker ceil/s",
      "naive/s",
      "dup/s",
      "e2e/db",
      "e2e/db6",
      "e2e/naive",
      "dup/e2e",
      "e2e/broker",
      "rt/msg",
      "commits/msg",
      "db rt/msg",
      "cpu us/msg",
    ],
    rows: rows.map((r) => [
      String(r.c),
      f0(r.e2e.rate),
      f1(r.p50),
      f1(r.p99),
      f0(r.db.rate),
      f0(r.db6.rate),
      f0(r.broker.rate),
      f0(r.naive.rate),
      f0(r.dup.rate),
      f2(r.e2e.rate / r.db.rate),
      f2(r.e2e.rate / r.db6.rate),
      f2(r.e2e.rate / r.naive.rate),
      f2(r.dup.rate / r.e2e.rate),
      f2(r.e2e.rate / r.broker.rate),
      f2(r.e2e.roundTrips),
      f2(r.e2e.commits),
      f2(r.db.roundTrips),
      f0(r.e2e.cpuUs),
    ]),
  };
}

export function batchedTable(rows: readonly LoopbackRow[]): { header: string[]; rows: string[][] } {
  return {
    header: [
      "conc",
      "batch",
      "batched/s",
      "p50 ms",
      "p99 ms",
      "dup/s",
      "b/db",
      "b/naive",
      "b/e2e",
      "p99 b/e2e",
      "dup/b",
      "rt/msg",
      "commits/msg",
      "cpu us/msg",
    ],
    rows: rows.map((r) => [
      String(r.c),
      String(r.batch),
      f0(r.batched.rate),
      f1(r.batchedP50),
      f1(r.batchedP99),
      f0(r.batchedDup.rate),
      f2(r.batched.rate / r.db.rate),
      f2(r.batched.rate / r.naive.rate),
      f2(r.batched.rate / r.e2e.rate),
      f2(r.batchedP99 / r.p99),
      f2(r.batchedDup.rate / r.batched.rate),
      f2(r.batched.roundTrips),
      f2(r.batched.commits),
      f0(r.batched.cpuUs),
    ]),
  };
}
