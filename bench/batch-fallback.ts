// `npm run bench:batch-fallback`: what a failing handler costs a batch, rolled back and run one by one (as built)
// against a savepoint per message, and what the savepoints cost a batch that does not fail. Embedded PostgreSQL,
// the example handler's two statements per message, batches of 4, 16 and 64 run one at a time (the worker's
// default SBINBOX_BATCH_MAX_IN_FLIGHT), pools built by postgresPoolConfig (pg pipeline mode on), sized as the
// worker sizes its pool for SBINBOX_MAX_CONCURRENT_CALLS = 2 x the batch. A benchmark, not a test.
import { availableParallelism, loadavg } from "node:os";
import pg from "pg";
import { moduleMigrations } from "../src/app/handler-module.ts";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { accountSql } from "../src/example/accounts.ts";
import { exampleModule } from "../src/example/module.ts";
import type { SqlExecutor } from "../src/domain/sql.ts";
import type { InboxBatchItem, InboxCore } from "../src/inbox/core.ts";
import { createPostgresInboxStore } from "../src/inbox/postgres/adapter.ts";
import { BEGIN, COMMIT, ROLLBACK, statements, batchStatements } from "../src/inbox/postgres/statements.ts";
import { countingPool } from "../test/helpers/counting-pool.ts";
import { formatTable } from "./common.ts";
import { median } from "./median.ts";
import { messageKey } from "../src/inbox/message-key.ts";

const PgClient = pg.Client;

const SIZES = (process.env.SBINBOX_BENCH_SIZES ?? "4,16,64").split(",").map(Number);
const MESSAGES = Number(process.env.SBINBOX_BENCH_MESSAGES ?? 640);
const ROUNDS = Number(process.env.SBINBOX_BENCH_ROUNDS ?? 7);
const CONSUMER = "bench";
const ACCOUNTS = 50;
const INSERT_MARKERS = batchStatements.insertMarkers();
const INSERT_CREDIT = accountSql.insertCredit.postgres;
const ADD_TO_BALANCE = accountSql.addToBalance.postgres;
const SAVEPOINT = "SAVEPOINT s";
const RELEASE = "RELEASE SAVEPOINT s";
const ROLLBACK_TO = "ROLLBACK TO SAVEPOINT s";
const DELETE_MARKER = `DELETE FROM "public"."Inbox"
WHERE "MessageKey" = $1 AND "ConsumerId" = (SELECT "Id" FROM "public"."InboxConsumer" WHERE "Name" = $2)`;

// The backend's own entry: pg_stat_get_backend_subxact takes the backend's index in pg_stat_get_backend_idset().
const SUBXACT_STATUS = `SELECT s.subxact_count AS n, s.subxact_overflowed AS overflowed
FROM pg_stat_get_backend_idset() AS b, pg_stat_get_backend_subxact(b) AS s
WHERE pg_stat_get_backend_pid(b) = pg_backend_pid()`;

const CHECK_EFFECTS = `SELECT
  (SELECT count(*)::int FROM "InboxMarkers" WHERE "Consumer" = $1) AS markers,
  (SELECT count(*)::int FROM "InboxMarkers" i WHERE i."Consumer" = $1
     AND NOT EXISTS (SELECT 1 FROM example_credits c WHERE c.message_id = i."MessageId")) AS bare,
  (SELECT count(*)::int FROM example_credits c
     WHERE NOT EXISTS (SELECT 1 FROM "InboxMarkers" i WHERE i."MessageId" = c.message_id AND i."Consumer" = $1)) AS orphans,
  (SELECT count(*)::int FROM (SELECT message_id FROM example_credits GROUP BY message_id HAVING count(*) > 1) d)
    AS doubled`;

/** Statements sent and round trips waited, counted on every client of the pools below. */
const counted = { statements: 0, roundTrips: 0 };

/** A pool built by postgresPoolConfig (pipeline mode on) whose clients count into `counted`. */
function pool(url: string, max: number): pg.Pool {
  return countingPool(url, max, true, counted).pool;
}

class HandlerFailure extends Error {
  constructor(id: string) {
    super(`bench: the handler of ${id} fails`);
    this.name = "HandlerFailure";
  }
}

/** The example handler's statements for one message; the failing one fails after its first statement. */
const credit = (id: string, i: number): unknown[] => [id, `acct-${i % ACCOUNTS}`, 1];
const balance = (i: number): unknown[] => [`acct-${i % ACCOUNTS}`, 1];
function work(id: string, i: number, fails: boolean): (tx: SqlExecutor) => Promise<void> {
  return async (tx) => {
    await tx.query(INSERT_CREDIT, credit(id, i));
    if (fails) throw new HandlerFailure(id);
    await tx.query(ADD_TO_BALANCE, balance(i));
  };
}

/** Statements issued together: one write on a pipelining client, one round trip. Every result is awaited. */
async function together(client: pg.PoolClient, ...sent: [string, unknown[]?][]): Promise<pg.QueryResult[]> {
  const settled = await Promise.allSettled(sent.map(([sql, params]) => client.query(sql, params)));
  const failed = settled.find((s) => s.status === "rejected");
  if (failed) throw failed.reason;
  return settled.map((s) => (s as PromiseFulfilledResult<pg.QueryResult>).value);
}

type Savepoints = "none" | "apart" | "piped";

/**
 * One batch in bare SQL on one client: BEGIN with the marker insert, each message's two statements, COMMIT.
 * Savepoints "apart": SAVEPOINT and RELEASE each a round trip of their own; "piped": SAVEPOINT rides with the
 * message's first statement and the previous message's RELEASE with it (COMMIT releases the last). With a
 * savepoint, the failing message is rolled back to it and its marker deleted, the rest commit; without one, the
 * batch rolls back whole.
 */
async function bareBatch(
  p: pg.Pool,
  ids: readonly string[],
  failing: number,
  savepoints: Savepoints,
  beforeCommit?: (client: pg.PoolClient) => Promise<void>,
): Promise<"committed" | "rolled back"> {
  const client = await p.connect();
  try {
    await together(client, [BEGIN], [INSERT_MARKERS, [[...ids].sort().map(messageKey), CONSUMER]]);
    let open = false; // a savepoint not yet released
    for (let i = 0; i < ids.length; i += 1) {
      const id = ids[i]!;
      const first: [string, unknown[]] = [INSERT_CREDIT, credit(id, i)];
      try {
        if (savepoints === "none") await client.query(...first);
        else if (savepoints === "apart") {
          await client.query(SAVEPOINT);
          await client.query(...first);
        } else await together(client, ...(open ? [[RELEASE] as [string]] : []), [SAVEPOINT], first);
        open = savepoints === "piped";
        if (i === failing) throw new HandlerFailure(id);
        await client.query(ADD_TO_BALANCE, balance(i));
        if (savepoints === "apart") await client.query(RELEASE);
      } catch (error) {
        if (!(error instanceof HandlerFailure)) throw error;
        if (savepoints === "none") {
          await client.query(ROLLBACK);
          return "rolled back";
        }
        // Its writes undone, its marker gone: the failing message is left to its own transaction.
        await together(client, [ROLLBACK_TO], [RELEASE], [DELETE_MARKER, [messageKey(id), CONSUMER]]);
        open = false;
      }
    }
    await beforeCommit?.(client);
    await client.query(COMMIT);
    return "committed";
  } catch (error) {
    await client.query(ROLLBACK).catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/** One message alone in bare SQL, as the store's single path sends it for a first delivery (no pre-check). */
async function bareSingle(p: pg.Pool, id: string, i: number, fails: boolean): Promise<void> {
  const client = await p.connect();
  try {
    await together(client, [BEGIN], [statements.insertProcessedMarker, [messageKey(id), CONSUMER]]);
    await client.query(INSERT_CREDIT, credit(id, i));
    if (fails) {
      await client.query(ROLLBACK);
      return;
    }
    await client.query(ADD_TO_BALANCE, balance(i));
    await client.query(COMMIT);
  } finally {
    client.release();
  }
}

/** The batch as built: processBatch, and when it rolls back, every message alone at once (src/worker/batcher.ts). */
async function storeBatch(store: InboxCore, ids: readonly string[], failing: number): Promise<void> {
  const items: InboxBatchItem[] = ids.map((id, i) => ({
    messageId: id,
    firstDelivery: true,
    work: work(id, i, i === failing),
  }));
  const result = await store.processBatch(CONSUMER, items);
  const alone = result.outcomes.flatMap((o, i) => (o.kind === "single" ? [i] : []));
  if (failing < 0 && alone.length > 0) throw new Error(`bench: the batch failed: ${String(result.failure)}`);
  if (failing >= 0 && alone.length !== ids.length)
    throw new Error("bench: expected the batch to go one by one");
  const outcomes = await Promise.all(
    alone.map((i) =>
      store.process({ messageId: ids[i]!, consumer: CONSUMER }, items[i]!.work, { firstDelivery: true }),
    ),
  );
  outcomes.forEach((o, k) => {
    const expected = alone[k] === failing ? "failed" : "committed";
    if (o.kind !== expected) throw new Error(`bench: expected ${expected}, got ${o.kind}`);
  });
}

/** The savepoint route: the batch commits all but the failing one, which then runs (and fails) alone. */
async function savepointBatch(p: pg.Pool, ids: readonly string[], failing: number): Promise<void> {
  if ((await bareBatch(p, ids, failing, "piped")) !== "committed")
    throw new Error("bench: expected a commit");
  if (failing >= 0) await bareSingle(p, ids[failing]!, failing, true);
}

/** Rolled back whole, then every message alone at once, in bare SQL. */
async function bareFallback(p: pg.Pool, ids: readonly string[], failing: number): Promise<void> {
  if ((await bareBatch(p, ids, failing, "none")) !== "rolled back")
    throw new Error("bench: expected a rollback");
  await Promise.all(ids.map((id, i) => bareSingle(p, id, i, i === failing)));
}

interface Contender {
  readonly name: string;
  readonly fails: boolean;
  readonly batch: (ids: readonly string[], failing: number) => Promise<void>;
}

interface Figures {
  rates: number[];
  statements: number;
  roundTrips: number;
}

/** Runs `messages` in batches of `size`, one batch at a time; messages per second and counts per batch. */
async function measure(
  c: Contender,
  size: number,
  tag: string,
  messages: number,
): Promise<[number, number, number]> {
  const batches = Math.ceil(messages / size);
  const failing = c.fails ? Math.floor(size / 2) : -1;
  const before = { ...counted };
  const started = process.hrtime.bigint();
  for (let b = 0; b < batches; b += 1) {
    const ids = Array.from({ length: size }, (_, i) => `${tag}-${b}-${i}`);
    await c.batch(ids, failing);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const per = (n: number) => n / batches;
  return [
    (batches * size) / seconds,
    per(counted.statements - before.statements),
    per(counted.roundTrips - before.roundTrips),
  ];
}

/**
 * Every route must leave one effect per committed message and none for a failed one: a marker without its credit
 * row, a credit row without its marker, or a doubled credit would make its figures meaningless.
 */
async function checkOneEffectEach(p: pg.Pool): Promise<number> {
  const result = await p.query<{ markers: number; bare: number; orphans: number; doubled: number }>(
    CHECK_EFFECTS,
    [CONSUMER],
  );
  const row = result.rows[0]!;
  if (row.bare > 0 || row.orphans > 0 || row.doubled > 0)
    throw new Error(
      `bench: ${row.bare} markers without a credit, ${row.orphans} credits without a marker, ${row.doubled} doubled`,
    );
  return row.markers;
}

/** One batch with a savepoint per message; what the backend's subtransaction cache holds before its COMMIT. */
async function probeSubtransactions(p: pg.Pool, size: number, tag: string): Promise<string[]> {
  let seen: string[] = [String(size), "?", "?"];
  const ids = Array.from({ length: size }, (_, i) => `${tag}-${i}`);
  await bareBatch(p, ids, -1, "piped", async (client) => {
    const result = await client.query<{ n: number; overflowed: boolean }>(SUBXACT_STATUS);
    const row = result.rows[0];
    if (row) seen = [String(size), String(row.n), String(row.overflowed)];
  });
  return seen;
}

async function main(): Promise<void> {
  const server = await EmbeddedPostgresServer.create();
  const report: string[] = [];
  const started = new Date();
  const loads = [loadavg()[0]!];
  try {
    const url = await server.createDatabase("sbinbox_bench_fallback");
    const setup = createPostgresInboxStore({ url, maxConnections: 2 });
    await setup.migrate(await moduleMigrations(exampleModule, "postgres"));
    // The raw inserts below name the consumer by its Id: registered as the worker registers it.
    const registrar = new PgClient({ connectionString: url });
    await registrar.connect();
    await registrar.query(statements.registerConsumer, [CONSUMER]);
    await registrar.end();
    await setup.close();
    const rows: string[][] = [];
    const summary: string[][] = [];
    const pairs: string[][] = [];
    const probes: string[][] = [];
    for (const size of SIZES) {
      // The worker's pool: SBINBOX_MAX_CONCURRENT_CALLS + 4 connections (src/app/app.ts), concurrency 2 x batch.
      const max = 2 * size + 4;
      const storePool = pool(url, max);
      const store = createPostgresInboxStore({ pool: storePool });
      const bare = pool(url, max);
      const contenders: Contender[] = [
        { name: "as built: processBatch", fails: false, batch: (ids) => storeBatch(store, ids, -1) },
        {
          name: "bare, no savepoints",
          fails: false,
          batch: (ids) => bareBatch(bare, ids, -1, "none").then(),
        },
        {
          name: "bare, savepoints apart",
          fails: false,
          batch: (ids) => bareBatch(bare, ids, -1, "apart").then(),
        },
        {
          name: "bare, savepoints piped",
          fails: false,
          batch: (ids) => bareBatch(bare, ids, -1, "piped").then(),
        },
        {
          name: "1 fails, as built: rollback+singles",
          fails: true,
          batch: (ids, f) => storeBatch(store, ids, f),
        },
        {
          name: "1 fails, bare: rollback+singles",
          fails: true,
          batch: (ids, f) => bareFallback(bare, ids, f),
        },
        {
          name: "1 fails, bare: savepoints piped",
          fails: true,
          batch: (ids, f) => savepointBatch(bare, ids, f),
        },
      ];
      const figures = new Map<string, Figures>(
        contenders.map((c) => [c.name, { rates: [], statements: 0, roundTrips: 0 }]),
      );
      // Warm-up: connections, plans, the example's account rows; counts taken from it, where nothing else runs.
      for (const c of contenders) {
        const [, statementsPer, roundTripsPer] = await measure(
          c,
          size,
          `w${size}-${contenders.indexOf(c)}`,
          Math.max(2 * size, 128),
        );
        Object.assign(figures.get(c.name)!, { statements: statementsPer, roundTrips: roundTripsPer });
      }
      probes.push(await probeSubtransactions(bare, size, `p${size}`));
      for (let round = 0; round < ROUNDS; round += 1) {
        // Alternate the order each round, so no contender always runs right after the same other one.
        const order = round % 2 === 0 ? contenders : [...contenders].reverse();
        for (const c of order) {
          const [rate] = await measure(c, size, `r${size}-${round}-${contenders.indexOf(c)}`, MESSAGES);
          figures.get(c.name)!.rates.push(rate);
        }
        loads.push(loadavg()[0]!);
      }
      const med = (name: string) => median(figures.get(name)!.rates);
      for (const c of contenders) {
        const f = figures.get(c.name)!;
        rows.push([
          String(size),
          c.name,
          med(c.name).toFixed(0),
          `${Math.min(...f.rates).toFixed(0)}-${Math.max(...f.rates).toFixed(0)}`,
          f.statements.toFixed(1),
          f.roundTrips.toFixed(1),
        ]);
      }
      // Each round's two contenders ran minutes apart at most, so a ratio per round is less noisy than a ratio of
      // medians taken from different rounds: its median and range say whether the direction holds.
      const paired = (a: string, b: string): string => {
        const ra = figures.get(a)!.rates;
        const rb = figures.get(b)!.rates;
        const ratios = ra.map((x, i) => x / rb[i]!);
        return `${median(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)})`;
      };
      pairs.push([
        String(size),
        paired("as built: processBatch", "bare, no savepoints"),
        paired("bare, savepoints apart", "bare, no savepoints"),
        paired("bare, savepoints piped", "bare, no savepoints"),
        paired("1 fails, as built: rollback+singles", "as built: processBatch"),
        paired("1 fails, bare: savepoints piped", "1 fails, bare: rollback+singles"),
      ]);
      const nosp = med("bare, no savepoints");
      const piped = med("bare, savepoints piped");
      const fallback = med("1 fails, bare: rollback+singles");
      const spFail = med("1 fails, bare: savepoints piped");
      // Per batch, seconds: the savepoints' extra on a good batch against what they save on a failing one.
      const extra = size / piped - size / nosp;
      const saved = size / fallback - size / spFail;
      const breakEven = extra <= 0 ? 0 : saved <= 0 ? 1 : extra / (extra + saved);
      summary.push([
        String(size),
        (med("as built: processBatch") / nosp).toFixed(2),
        (med("bare, savepoints apart") / nosp).toFixed(2),
        (piped / nosp).toFixed(2),
        (med("1 fails, as built: rollback+singles") / med("as built: processBatch")).toFixed(2),
        (fallback / nosp).toFixed(2),
        (spFail / fallback).toFixed(2),
        saved <= 0 ? "never" : `${(breakEven * 100).toFixed(1)}%`,
      ]);
      await store.close();
      await storePool.end();
      await bare.end();
    }
    // Past the cache: a batch of 65 (SBINBOX_BATCH_SIZE allows up to 1,000).
    const probePool = pool(url, 1);
    for (const size of [65, 256]) probes.push(await probeSubtransactions(probePool, size, `p${size}`));
    const markers = await checkOneEffectEach(probePool);
    await probePool.end();
    report.push(
      `batch fallback benchmark: embedded PostgreSQL, ${MESSAGES} messages per run in batches run one at a time, ` +
        `${ROUNDS} rounds, msgs/s (median, min-max); statements and round trips per batch, counted on the client`,
      ...formatTable(["batch", "route", "msgs/s", "min-max", "stmts", "round trips"], rows),
      "",
      "ratios of the medians: store/bare = processBatch / bare loop; sp apart, sp piped = savepoints / none (a good " +
        "batch); fail/ok = a batch with one failing handler / a good one, as built; fallback/bare = bare " +
        "rollback+singles / bare good batch; sp/fallback = savepoint route / bare rollback+singles (one failing); " +
        "break-even = the share of batches that must fail for piped savepoints to cost less overall",
      ...formatTable(
        [
          "batch",
          "store/bare",
          "sp apart",
          "sp piped",
          "fail/ok",
          "fallback/bare",
          "sp/fallback",
          "break-even",
        ],
        summary,
      ),
      "",
      "the same ratios per round (each round's contenders ran back to back), median (min-max):",
      ...formatTable(["batch", "store/bare", "sp apart", "sp piped", "fail/ok", "sp/fallback"], pairs),
      "",
      "the backend's subtransaction cache before COMMIT of one batch with a savepoint per message " +
        "(pg_stat_get_backend_subxact; PostgreSQL caches 64 subxids per backend, then looks them up in pg_subtrans):",
      ...formatTable(["batch", "subxids cached", "overflowed"], probes),
      `checked: each of the ${markers} inbox markers has exactly one credit row and every credit row its marker`,
      `started ${started.toISOString()}, ended ${new Date().toISOString()}; machine: ${availableParallelism()} cores, ` +
        `1-min load average ${Math.min(...loads).toFixed(2)}-${Math.max(...loads).toFixed(2)} over the run`,
    );
    process.stdout.write(`${report.join("\n")}\n`);
  } finally {
    await server.dispose();
  }
}

await main();
