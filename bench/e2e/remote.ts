// The database a network hop away: the proxy holds every chunk REMOTE_DELAY_MS each way (1 ms round trip at the
// default, a database in the same Azure region as the App Service), the worker single and batched against the
// database ceiling at the same delay, in rounds taking turns.
import { databaseCeiling } from "./ceilings.ts";
import {
  CONCURRENCY,
  MESSAGES,
  REMOTE_DELAY_MS,
  ROUNDS,
  batchSizeAt,
  drainWithWorker,
  freshEvents,
  type Drain,
  type Harness,
} from "./harness.ts";
import { medianDrain, range } from "./loopback.ts";

export interface RemoteRow {
  readonly c: number;
  readonly batch: number;
  readonly e2e: Drain;
  readonly batched: Drain;
  readonly db: Drain;
  readonly spread: string;
}

/** Fewer messages at concurrency 1, where each costs several milliseconds of round trips. */
const messagesAt = (c: number) => (c === 1 ? Math.max(200, Math.round(MESSAGES / 4)) : MESSAGES);

export async function remoteRows(h: Harness): Promise<RemoteRow[]> {
  await h.proxy.setDelay(REMOTE_DELAY_MS);
  try {
    const rows: RemoteRow[] = [];
    for (const c of CONCURRENCY) {
      process.stdout.write(`remote (${REMOTE_DELAY_MS} ms each way), concurrency ${c} ...\n`);
      const b = batchSizeAt(c);
      const n = messagesAt(c);
      const runs = { e2e: [] as Drain[], batched: [] as Drain[], db: [] as Drain[] };
      for (let round = 0; round < ROUNDS; round += 1) {
        const steps = [
          async () => void runs.e2e.push(await drainWithWorker(h, c, freshEvents(n), "committed")),
          async () => void runs.batched.push(await drainWithWorker(h, c, freshEvents(n), "committed", b)),
          async () => void runs.db.push(await databaseCeiling(h, c, n)),
        ];
        for (const step of round % 2 === 0 ? steps : steps.reverse()) await step();
      }
      rows.push({
        c,
        batch: b,
        e2e: medianDrain(runs.e2e),
        batched: medianDrain(runs.batched),
        db: medianDrain(runs.db),
        spread: `  remote conc ${c}: e2e ${range(runs.e2e)}, batched ${range(runs.batched)}, db ${range(runs.db)}`,
      });
    }
    return rows;
  } finally {
    await h.proxy.setDelay(0);
  }
}

export function remoteTable(rows: readonly RemoteRow[]): { header: string[]; rows: string[][] } {
  return {
    header: [
      "conc",
      "batch",
      "e2e/s",
      "batched/s",
      "db ceil/s",
      "e2e/db",
      "b/db",
      "b/e2e",
      "rt/msg e2e",
      "rt/msg b",
      "commits/msg b",
      "cpu us e2e",
      "cpu us b",
    ],
    rows: rows.map((r) => [
      String(r.c),
      String(r.batch),
      r.e2e.rate.toFixed(0),
      r.batched.rate.toFixed(0),
      r.db.rate.toFixed(0),
      (r.e2e.rate / r.db.rate).toFixed(2),
      (r.batched.rate / r.db.rate).toFixed(2),
      (r.batched.rate / r.e2e.rate).toFixed(2),
      r.e2e.roundTrips.toFixed(2),
      r.batched.roundTrips.toFixed(2),
      r.batched.commits.toFixed(2),
      r.e2e.cpuUs.toFixed(0),
      r.batched.cpuUs.toFixed(0),
    ]),
  };
}
