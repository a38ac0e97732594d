// `npm run bench:inbox`: messages per second through the inbox store on an embedded PostgreSQL, fresh and
// duplicate paths, at concurrency 1 and 16, against the same SQL issued in a bare loop on a bare pg pool.
// A benchmark, not a test: it prints figures and the ratios the targets are stated in.
import { availableParallelism, loadavg } from "node:os";
import pg from "pg";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { InboxCore } from "../src/inbox/core.ts";
import { createPostgresInboxStore, PostgresDriver } from "../src/inbox/postgres/adapter.ts";
import { statements } from "../src/inbox/postgres/statements.ts";
import { formatTable, inBareTransaction } from "./common.ts";
import type { SqlExecutor } from "../src/domain/sql.ts";
import { median } from "./median.ts";

const MESSAGES = Number(process.env.SBINBOX_BENCH_MESSAGES ?? 3000);
const CONCURRENCY = [1, 16];
const ROUNDS = 5;
const INSERT_EFFECT = `INSERT INTO "Effects" ("MessageId") VALUES ($1)`;

/** Runs `count` operations with `concurrency` workers; returns operations per second. */
async function rate(count: number, concurrency: number, op: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < count; i = next++) await op(i);
    }),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return count / seconds;
}

async function main(): Promise<void> {
  const server = await EmbeddedPostgresServer.create();
  try {
    const url = await server.createDatabase("sbinbox_bench");
    const store = createPostgresInboxStore({ url, maxConnections: 16 });
    const storeNoPreCheck = createPostgresInboxStore({ url, maxConnections: 16, preCheck: false });
    // The same store without the OpenTelemetry wrappers the factory adds: shows what the tracing costs.
    const untraced = new InboxCore(new PostgresDriver({ url, maxConnections: 16 }));
    const bare = new pg.Pool({ connectionString: url, max: 16 });
    bare.on("error", () => undefined); // idle connections end when the server stops
    await store.migrate();
    await bare.query(
      `CREATE TABLE "Effects" ("Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "MessageId" text)`,
    );
    const effect = (id: string) => (tx: SqlExecutor) => tx.query(INSERT_EFFECT, [id]).then(() => undefined);

    /** What the store sends for a fresh message, issued by hand: pre-check, BEGIN, marker, effect, COMMIT. */
    const bareFresh = async (id: string, consumer: string) => {
      const seen = await bare.query(statements.isProcessed, [id, consumer]);
      if (seen.rows.length > 0) throw new Error("bench: unexpected duplicate");
      await inBareTransaction(bare, async (client) => {
        await client.query(statements.insertProcessedMarker, [id, consumer]);
        await client.query(INSERT_EFFECT, [id]);
      });
    };
    /** What the store sends for a duplicate found by the pre-check. */
    const bareDuplicate = async (id: string, consumer: string) => {
      const seen = await bare.query(statements.isProcessed, [id, consumer]);
      if (seen.rows.length === 0) throw new Error("bench: expected a duplicate");
    };
    const expect = (kind: string) => (o: { kind: string }) => {
      if (o.kind !== kind) throw new Error(`bench: expected ${kind}, got ${o.kind}`);
    };

    // Warm up connections, plans and caches for both paths.
    await rate(500, 16, (i) =>
      store.process({ messageId: `warm-${i}`, consumer: "s" }, effect(`warm-${i}`)).then(expect("committed")),
    );
    await rate(500, 16, (i) => bareFresh(`warm-${i}`, "b"));
    await rate(500, 16, (i) =>
      store.process({ messageId: `warm-${i}`, consumer: "s" }, effect("never")).then(expect("duplicate")),
    );
    await rate(500, 16, (i) => bareDuplicate(`warm-${i}`, "b"));

    // Several rounds per cell, the store and the bare loop taking turns, and the median reported: the machine is
    // shared, and one noisy stretch should not decide a ratio.
    const rows: string[][] = [];
    for (const c of CONCURRENCY) {
      const runs = {
        storeFresh: [] as number[],
        bareFresh: [] as number[],
        storeDup: [] as number[],
        bareDup: [] as number[],
        noPre: [] as number[],
        untracedDup: [] as number[],
      };
      for (let round = 0; round < ROUNDS; round += 1) {
        const tag = `c${c}r${round}`;
        const key = (i: number) => ({ messageId: `${tag}-s-${i}`, consumer: "bench" });
        const storeFreshRun = async () => {
          runs.storeFresh.push(
            await rate(MESSAGES, c, (i) =>
              store.process(key(i), effect(`${tag}-s-${i}`)).then(expect("committed")),
            ),
          );
        };
        const bareFreshRun = async () => {
          runs.bareFresh.push(await rate(MESSAGES, c, (i) => bareFresh(`${tag}-b-${i}`, "bench")));
        };
        const storeDupRun = async () => {
          runs.storeDup.push(
            await rate(MESSAGES, c, (i) => store.process(key(i), effect("never")).then(expect("duplicate"))),
          );
        };
        const bareDupRun = async () => {
          runs.bareDup.push(await rate(MESSAGES, c, (i) => bareDuplicate(`${tag}-b-${i}`, "bench")));
        };
        // Alternate who goes first, so neither side always runs right after the other's writes.
        const pairs =
          round % 2 === 0
            ? [storeFreshRun, bareFreshRun, storeDupRun, bareDupRun]
            : [bareFreshRun, storeFreshRun, bareDupRun, storeDupRun];
        for (const run of pairs) await run();
        runs.untracedDup.push(
          await rate(MESSAGES, c, (i) => untraced.process(key(i), effect("never")).then(expect("duplicate"))),
        );
        runs.noPre.push(
          await rate(MESSAGES, c, (i) =>
            storeNoPreCheck.process(key(i), effect("never")).then(expect("duplicate")),
          ),
        );
      }
      const [storeFresh, bareFreshRate, storeDup, bareDup, dupNoPreCheck, dupUntraced] = [
        runs.storeFresh,
        runs.bareFresh,
        runs.storeDup,
        runs.bareDup,
        runs.noPre,
        runs.untracedDup,
      ].map(median) as [number, number, number, number, number, number];
      rows.push([
        String(c),
        storeFresh.toFixed(0),
        bareFreshRate.toFixed(0),
        (storeFresh / bareFreshRate).toFixed(2),
        storeDup.toFixed(0),
        bareDup.toFixed(0),
        (storeDup / bareDup).toFixed(2),
        (storeDup / storeFresh).toFixed(2),
        dupNoPreCheck.toFixed(0),
        dupUntraced.toFixed(0),
      ]);
    }
    const header = [
      "conc",
      "fresh store/s",
      "fresh bare/s",
      "store/bare",
      "dup store/s",
      "dup bare/s",
      "store/bare",
      "dup/fresh",
      "dup no-precheck/s",
      "dup untraced/s",
    ];
    process.stdout.write(
      `inbox benchmark: embedded PostgreSQL, ${MESSAGES} messages per run, median of ${ROUNDS} runs, msgs/s\n`,
    );
    process.stdout.write(`${formatTable(header, rows).join("\n")}\n`);
    // Client and server share this machine: a busy machine moves every figure, so say how busy it was.
    process.stdout.write(
      `machine: ${availableParallelism()} cores, load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(" ")} (1, 5, 15 min)\n`,
    );
    process.stdout.write(
      "targets: store/bare >= 0.90; dup/fresh >= 3.00 (duplicates found by the pre-check)\n",
    );
    await store.close();
    await storeNoPreCheck.close();
    await untraced.close();
    await bare.end();
  } finally {
    await server.dispose();
  }
}

await main();
