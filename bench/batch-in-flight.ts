// `npm run bench:batch-in-flight`: how many batch transactions to run at once (SBINBOX_BATCH_MAX_IN_FLIGHT), with
// the batcher as the worker runs it, the example handler's two statements, keyed by account, on the embedded
// PostgreSQL (loopback). A window of SBINBOX_BENCH_WINDOW messages in flight (as SBINBOX_MAX_CONCURRENT_CALLS),
// batches of SBINBOX_BENCH_BATCH, random accounts among SBINBOX_BENCH_ACCOUNTS; rounds alternate the settings so
// that a noisy machine spreads over all of them. A benchmark, not a test: it prints figures.
import { loadavg } from "node:os";
import { moduleMigrations } from "../src/app/handler-module.ts";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { accountSql } from "../src/example/accounts.ts";
import { exampleModule } from "../src/example/module.ts";
import type { SqlExecutor } from "../src/domain/sql.ts";
import { createPostgresInboxStore } from "../src/inbox/postgres/adapter.ts";
import { Batcher, type BatchOutcome } from "../src/worker/batcher.ts";
import { formatTable } from "./common.ts";
import { median } from "./median.ts";

const IN_FLIGHT = (process.env.SBINBOX_BENCH_IN_FLIGHT ?? "1,2,4,8").split(",").map(Number);
const MESSAGES = Number(process.env.SBINBOX_BENCH_MESSAGES ?? 2_000);
const ROUNDS = Number(process.env.SBINBOX_BENCH_ROUNDS ?? 3);
const WINDOW = Number(process.env.SBINBOX_BENCH_WINDOW ?? 32);
const BATCH = Number(process.env.SBINBOX_BENCH_BATCH ?? 16);
const ACCOUNTS = Number(process.env.SBINBOX_BENCH_ACCOUNTS ?? 200);
/** The batcher's wait (SBINBOX_BATCH_WAIT_MS); 0, the worker's default. The default of 4 in flight was chosen at 2. */
const WAIT_MS = Number(process.env.SBINBOX_BENCH_BATCH_WAIT_MS ?? 0);

const credit = (id: string, account: string) => async (tx: SqlExecutor) => {
  await tx.query(accountSql.insertCredit.postgres, [id, account, 1]);
  await tx.query(accountSql.addToBalance.postgres, [account, 1]);
};

async function drain(
  url: string,
  label: string,
  inFlight: number,
  keyed: boolean,
): Promise<{ rate: number; deadlocks: number }> {
  // Sized as the worker sizes its pool: a connection per message in flight.
  const store = createPostgresInboxStore({ url, maxConnections: WINDOW, preCheck: "redeliveries" });
  const outcomes: BatchOutcome[] = [];
  const batcher = new Batcher({
    store,
    consumer: label,
    maxSize: BATCH,
    waitMs: WAIT_MS,
    maxInFlight: inFlight,
    onBatch: (_size, outcome) => outcomes.push(outcome),
  });
  let next = 0;
  const started = performance.now();
  const lane = async (): Promise<void> => {
    while (next < MESSAGES) {
      const n = next++;
      const id = `${label}-${n}`;
      const account = `acct-${Math.floor(Math.random() * ACCOUNTS)}`;
      const outcome = await batcher.process({ messageId: id, consumer: label }, credit(id, account), {
        firstDelivery: true,
        ...(keyed ? { keys: [`account:${account}`] } : {}),
      });
      if (outcome.kind !== "committed") throw new Error(`${id}: ${outcome.kind}`);
    }
  };
  await Promise.all(Array.from({ length: WINDOW }, lane));
  const seconds = (performance.now() - started) / 1000;
  await store.close();
  return { rate: MESSAGES / seconds, deadlocks: outcomes.filter((o) => o === "deadlock").length };
}

async function main(): Promise<void> {
  const server = await EmbeddedPostgresServer.create();
  const loads = [loadavg()[0]!];
  try {
    const url = await server.createDatabase("sbinbox_bench_in_flight");
    const setup = createPostgresInboxStore({ url, maxConnections: 2 });
    await setup.migrate(await moduleMigrations(exampleModule, "postgres"));
    await setup.close();
    const settings: [number, boolean][] = [...IN_FLIGHT.map((n): [number, boolean] => [n, true]), [4, false]];
    const rates = new Map<string, number[]>();
    const deadlocks = new Map<string, number>();
    for (let round = 0; round < ROUNDS; round += 1) {
      const order = round % 2 === 0 ? settings : [...settings].reverse();
      for (const [inFlight, keyed] of order) {
        const name = `${keyed ? "keyed" : "unkeyed"} in flight ${inFlight}`;
        const { rate, deadlocks: d } = await drain(url, `r${round}-${inFlight}-${keyed}`, inFlight, keyed);
        rates.set(name, [...(rates.get(name) ?? []), rate]);
        deadlocks.set(name, (deadlocks.get(name) ?? 0) + d);
        loads.push(loadavg()[0]!);
      }
    }
    const base = median(rates.get(`keyed in flight ${IN_FLIGHT[0]}`)!);
    const rows = [...rates].map(([name, r]) => [
      name,
      median(r).toFixed(0),
      `${Math.min(...r).toFixed(0)}-${Math.max(...r).toFixed(0)}`,
      (median(r) / base).toFixed(2),
      String(deadlocks.get(name)),
    ]);
    console.log(
      `${MESSAGES} messages a round, ${ROUNDS} rounds, window ${WINDOW}, batches of ${BATCH}, wait ${WAIT_MS} ms, ${ACCOUNTS} accounts; ` +
        `1-minute load average ${Math.min(...loads).toFixed(1)}-${Math.max(...loads).toFixed(1)}`,
    );
    for (const line of formatTable(
      ["setting", "msgs/s (median)", "min-max", `x ${IN_FLIGHT[0]}`, "deadlocks"],
      rows,
    ))
      console.log(line);
  } finally {
    await server.dispose();
  }
}

await main();
