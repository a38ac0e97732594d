// `npm run bench:inbox`: messages per second through the inbox store on an embedded PostgreSQL, fresh and
// duplicate paths, at concurrency 1 and 16, against the same SQL issued in a bare loop on a bare pg pool; and what
// the pre-check read costs a first delivery against what it saves a duplicate.
// A benchmark, not a test: it prints figures and the ratios the targets are stated in.
import { availableParallelism, loadavg } from "node:os";
import pg from "pg";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { InboxCore } from "../src/inbox/core.ts";
import { createPostgresInboxStore, PostgresDriver } from "../src/inbox/postgres/adapter.ts";
import { statements } from "../src/inbox/postgres/statements.ts";
import { messageKey } from "../src/inbox/message-key.ts";
import { formatTable } from "./common.ts";
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
    const storeAlwaysReads = createPostgresInboxStore({ url, maxConnections: 16, preCheck: true });
    // Never reads: its first deliveries whose markers exist are caught by the insert. (The default store would
    // start reading for them once a quarter of first deliveries turn out duplicates, as all of these do.)
    const storeNeverReads = createPostgresInboxStore({ url, maxConnections: 16, preCheck: false });
    // The same store without the OpenTelemetry wrappers the factory adds: shows what the tracing costs.
    const untraced = new InboxCore(new PostgresDriver({ url, maxConnections: 16 }));
    // Pipelining, as the store's own pool: BEGIN goes out with the marker insert.
    const bare = new pg.Pool({ connectionString: url, max: 16, pipeline: true });
    bare.on("error", () => undefined); // idle connections end when the server stops
    await store.migrate();
    await bare.query(
      `CREATE TABLE "Effects" ("Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "MessageId" text)`,
    );
    const effect = (id: string) => (tx: SqlExecutor) => tx.query(INSERT_EFFECT, [id]).then(() => undefined);
    const first = { firstDelivery: true };
    const redelivery = { firstDelivery: false };

    // The markers name the consumer by its Id: each registered once, as the worker does before its first message.
    const registered = new Set<string>();
    const register = async (consumer: string) => {
      if (registered.has(consumer)) return;
      await bare.query(statements.registerConsumer, [consumer]);
      registered.add(consumer);
    };
    /** What the store sends for a first delivery, issued by hand: BEGIN with the marker, effect, COMMIT. */
    const bareFresh = async (id: string, consumer: string) => {
      await register(consumer);
      const client = await bare.connect();
      try {
        await Promise.all([
          client.query("BEGIN"),
          client.query(statements.insertProcessedMarker, [messageKey(id), consumer]),
        ]);
        await client.query(INSERT_EFFECT, [id]);
        await client.query("COMMIT");
      } finally {
        client.release();
      }
    };
    /** What the store sends for a redelivery whose marker exists: the pre-check read. */
    const bareDuplicate = async (id: string, consumer: string) => {
      const seen = await bare.query(statements.isProcessed, [messageKey(id), consumer]);
      if (seen.rows.length === 0) throw new Error("bench: expected a duplicate");
    };
    const expect = (kind: string) => (o: { kind: string }) => {
      if (o.kind !== kind) throw new Error(`bench: expected ${kind}, got ${o.kind}`);
    };

    // Warm up connections, plans and caches for every path, each on the store that runs it in the rounds. Not the
    // default store's first-delivery duplicates: a run of them would switch it to reading for first deliveries.
    await rate(500, 16, (i) =>
      store
        .process({ messageId: `warm-${i}`, consumer: "s" }, effect(`warm-${i}`), first)
        .then(expect("committed")),
    );
    await rate(500, 16, (i) =>
      storeAlwaysReads
        .process({ messageId: `warm-r-${i}`, consumer: "s" }, effect(`warm-r-${i}`), first)
        .then(expect("committed")),
    );
    await rate(500, 16, (i) => bareFresh(`warm-${i}`, "b"));
    await rate(500, 16, (i) =>
      store
        .process({ messageId: `warm-${i}`, consumer: "s" }, effect("never"), redelivery)
        .then(expect("duplicate")),
    );
    await rate(500, 16, (i) =>
      storeNeverReads
        .process({ messageId: `warm-r-${i}`, consumer: "s" }, effect("never"), first)
        .then(expect("duplicate")),
    );
    await rate(500, 16, (i) => bareDuplicate(`warm-${i}`, "b"));

    // Several rounds per cell, the contenders taking turns, and the median reported: the machine is shared, and one
    // noisy stretch should not decide a ratio.
    const rows: string[][] = [];
    const breakEven: string[] = [];
    for (const c of CONCURRENCY) {
      const runs = {
        storeFresh: [] as number[],
        readFresh: [] as number[],
        bareFresh: [] as number[],
        storeDup: [] as number[],
        bareDup: [] as number[],
        firstDup: [] as number[],
        untracedDup: [] as number[],
      };
      for (let round = 0; round < ROUNDS; round += 1) {
        const tag = `c${c}r${round}`;
        const key = (i: number) => ({ messageId: `${tag}-s-${i}`, consumer: "bench" });
        const readKey = (i: number) => ({ messageId: `${tag}-r-${i}`, consumer: "bench" });
        const contenders = [
          // A first delivery with the default mode: no read.
          async () =>
            runs.storeFresh.push(
              await rate(MESSAGES, c, (i) =>
                store.process(key(i), effect(`${tag}-s-${i}`), first).then(expect("committed")),
              ),
            ),
          // The same with the read made anyway (SBINBOX_PRECHECK=true): what the read costs a first delivery.
          async () =>
            runs.readFresh.push(
              await rate(MESSAGES, c, (i) =>
                storeAlwaysReads
                  .process(readKey(i), effect(`${tag}-r-${i}`), first)
                  .then(expect("committed")),
              ),
            ),
          async () =>
            runs.bareFresh.push(await rate(MESSAGES, c, (i) => bareFresh(`${tag}-b-${i}`, "bench"))),
        ];
        const duplicates = [
          // A redelivery whose marker exists: found by the read.
          async () =>
            runs.storeDup.push(
              await rate(MESSAGES, c, (i) =>
                store.process(key(i), effect("never"), redelivery).then(expect("duplicate")),
              ),
            ),
          async () =>
            runs.bareDup.push(await rate(MESSAGES, c, (i) => bareDuplicate(`${tag}-b-${i}`, "bench"))),
          // A first delivery whose marker exists (a resend past the duplicate window): found by the insert.
          async () =>
            runs.firstDup.push(
              await rate(MESSAGES, c, (i) =>
                storeNeverReads.process(readKey(i), effect("never"), first).then(expect("duplicate")),
              ),
            ),
        ];
        // Alternate who goes first, so no one always runs right after another's writes.
        for (const run of round % 2 === 0 ? contenders : contenders.reverse()) await run();
        for (const run of round % 2 === 0 ? duplicates : duplicates.reverse()) await run();
        runs.untracedDup.push(
          await rate(MESSAGES, c, (i) =>
            untraced.process(key(i), effect("never"), redelivery).then(expect("duplicate")),
          ),
        );
      }
      const m = Object.fromEntries(Object.entries(runs).map(([k, v]) => [k, median(v)])) as Record<
        keyof typeof runs,
        number
      >;
      rows.push([
        String(c),
        m.storeFresh.toFixed(0),
        m.readFresh.toFixed(0),
        m.bareFresh.toFixed(0),
        (m.storeFresh / m.bareFresh).toFixed(2),
        m.storeDup.toFixed(0),
        m.bareDup.toFixed(0),
        (m.storeDup / m.bareDup).toFixed(2),
        (m.storeDup / m.storeFresh).toFixed(2),
        m.firstDup.toFixed(0),
        m.untracedDup.toFixed(0),
      ]);
      // Time per message (ms of one lane's wall time): what skipping the read saves a fresh first delivery, against
      // what it adds to a first delivery whose marker exists (a transaction rolled back instead of one read).
      const ms = (rateOf: number) => (1000 * c) / rateOf;
      const saved = ms(m.readFresh) - ms(m.storeFresh);
      const added = ms(m.firstDup) - ms(m.storeDup);
      breakEven.push(
        `  conc ${c}: the read costs a fresh first delivery ${saved.toFixed(3)} ms; skipping it costs a first ` +
          `delivery whose marker exists ${added.toFixed(3)} ms; skipping wins while fewer than ` +
          `${saved > 0 && added > 0 ? ((100 * saved) / (saved + added)).toFixed(0) : "?"}% of first deliveries are duplicates`,
      );
    }
    const header = [
      "conc",
      "fresh store/s",
      "fresh +read/s",
      "fresh bare/s",
      "store/bare",
      "dup store/s",
      "dup bare/s",
      "store/bare",
      "dup/fresh",
      "first dup/s",
      "dup untraced/s",
    ];
    process.stdout.write(
      `inbox benchmark: embedded PostgreSQL, ${MESSAGES} messages per run, median of ${ROUNDS} runs, msgs/s\n`,
    );
    process.stdout.write(`${formatTable(header, rows).join("\n")}\n`);
    process.stdout.write(
      "fresh = a first delivery (no read, SBINBOX_PRECHECK=redeliveries); +read = the same with the read " +
        "(SBINBOX_PRECHECK=true); dup = a redelivery whose marker exists (one read); first dup = a first delivery " +
        "whose marker exists, not read for (BEGIN with the marker insert, rolled back)\n",
    );
    process.stdout.write(`${breakEven.join("\n")}\n`);
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
    await storeAlwaysReads.close();
    await storeNeverReads.close();
    await untraced.close();
    await bare.end();
  } finally {
    await server.dispose();
  }
}

await main();
