// `npm run bench:inbox-legacy`: what the legacy look-up costs a message (issue 41). After migration 0002 the new
// workers read InboxLegacy's processed markers while it has any (docs/inbox.md, "Moving to 0002"). On an embedded
// PostgreSQL, two inboxes migrated from a version-1 inbox of SBINBOX_BENCH_LEGACY markers (default 100,000): one
// whose InboxLegacy still holds them, one where it is empty (as retention leaves it). Through the store, fresh
// first deliveries one transaction a message and in batches of 32, then messages whose marker is in InboxLegacy:
// statements and round trips a message (counted on the pool's clients) and the bench process's CPU a message,
// alternated runs, medians (and the rounds' CPU min-max). The handlers do nothing, so the figures are the inbox's own. A benchmark, not a test.
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { loadavg } from "node:os";
import pg from "pg";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { createPostgresInboxStore, POSTGRES_MIGRATIONS_DIR } from "../src/inbox/postgres/adapter.ts";
import { postgresSql } from "../src/inbox/postgres/statements.ts";
import { messageKey } from "../src/inbox/message-key.ts";
import type { InboxCore } from "../src/inbox/core.ts";
import { countingPool, type RoundTrips } from "../test/helpers/counting-pool.ts";
import { formatTable } from "./common.ts";
import { median } from "./median.ts";

const LEGACY = Number(process.env.SBINBOX_BENCH_LEGACY ?? 100_000);
const MESSAGES = Number(process.env.SBINBOX_BENCH_MESSAGES ?? 3000);
const ROUNDS = Number(process.env.SBINBOX_BENCH_ROUNDS ?? 3);
const CONCURRENCY = 8;
const BATCH = 32;
const CONSUMER = "orders";

/** A version-1 inbox with LEGACY processed markers `legacy-<n>`, then 0002 through the store's runner. */
async function migratedInbox(url: string, keepLegacy: boolean): Promise<void> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    const sql = postgresSql();
    await admin.query(sql.CREATE_VERSION_TABLE);
    await admin.query(await readFile(join(POSTGRES_MIGRATIONS_DIR, "0001_inbox.sql"), "utf8"));
    await admin.query(sql.RECORD_VERSION, [1, "0001_inbox"]);
    await admin.query(
      `INSERT INTO "Inbox" ("MessageId", "Consumer", "ProcessedUtc")
       SELECT 'legacy-' || g, $1, now() FROM generate_series(1, $2::integer) AS g`,
      [CONSUMER, LEGACY],
    );
    const store = createPostgresInboxStore({ url, maxConnections: 1 });
    await store.migrate();
    await store.close();
    // As retention leaves it once every legacy marker is past the retention: the table there, no rows.
    if (!keepLegacy) await admin.query(`DELETE FROM "InboxLegacy"`);
    await admin.query("VACUUM ANALYZE");
  } finally {
    await admin.end();
  }
}

interface Figures {
  statements: number;
  roundTrips: number;
  cpuUs: number;
}

/** Runs `count` operations on CONCURRENCY lanes; returns what they cost each (counted, CPU of this process). */
async function measure(
  counted: RoundTrips,
  count: number,
  op: (i: number) => Promise<void>,
): Promise<Figures> {
  const before = { ...counted };
  const cpu = process.cpuUsage();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < count; i = next++) await op(i);
    }),
  );
  const used = process.cpuUsage(cpu);
  return {
    statements: (counted.statements - before.statements) / count,
    roundTrips: (counted.roundTrips - before.roundTrips) / count,
    cpuUs: (used.user + used.system) / count,
  };
}

const nothing = () => Promise.resolve();

/** One message a transaction, fresh first deliveries (the default pre-check does not read for them). */
async function single(store: InboxCore, counted: RoundTrips): Promise<Figures> {
  return measure(counted, MESSAGES, async () => {
    const outcome = await store.process({ consumer: CONSUMER, messageId: randomUUID() }, nothing, {
      firstDelivery: true,
    });
    if (outcome.kind !== "committed") throw new Error(`bench:inbox-legacy: a fresh message ${outcome.kind}`);
  });
}

/** Batches of BATCH fresh first deliveries; figures a message. */
async function batched(store: InboxCore, counted: RoundTrips): Promise<Figures> {
  const batches = Math.ceil(MESSAGES / BATCH);
  const f = await measure(counted, batches, async () => {
    const items = Array.from({ length: BATCH }, () => ({
      messageId: randomUUID(),
      work: nothing,
      firstDelivery: true,
    }));
    const result = await store.processBatch(CONSUMER, items);
    if (result.failure !== undefined)
      throw new Error("bench:inbox-legacy: a batch failed", { cause: result.failure });
  });
  return { statements: f.statements / BATCH, roundTrips: f.roundTrips / BATCH, cpuUs: f.cpuUs / BATCH };
}

/**
 * Redeliveries of processed messages `legacy-<n>`: found in InboxLegacy where it holds them, else in the new
 * table (the empty inbox has the same markers there), by the default pre-check a redelivery gets.
 */
async function redeliveries(store: InboxCore, counted: RoundTrips): Promise<Figures> {
  return measure(counted, MESSAGES, async (i) => {
    const messageId = `legacy-${1 + (i % LEGACY)}`;
    const outcome = await store.process({ consumer: CONSUMER, messageId }, nothing, { firstDelivery: false });
    if (outcome.kind !== "duplicate") throw new Error(`bench:inbox-legacy: ${messageId} ${outcome.kind}`);
  });
}

/** The same processed markers in the new table, for the empty inbox's redeliveries. */
async function newMarkers(url: string): Promise<void> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    for (let at = 1; at <= LEGACY; at += 10_000) {
      const keys = Array.from({ length: Math.min(10_000, LEGACY - at + 1) }, (_, i) =>
        messageKey(`legacy-${at + i}`),
      );
      await admin.query(
        `INSERT INTO "Inbox" ("ConsumerId", "MessageKey")
         SELECT (SELECT "Id" FROM "InboxConsumer" WHERE "Name" = $2), k FROM unnest($1::bytea[]) AS k`,
        [keys, CONSUMER],
      );
    }
    await admin.query("VACUUM ANALYZE");
  } finally {
    await admin.end();
  }
}

type Row = Record<"single" | "batched" | "old", Figures[]>;

async function main(): Promise<void> {
  const server = await EmbeddedPostgresServer.create();
  try {
    console.log(
      `bench:inbox-legacy: ${LEGACY} legacy markers, ${MESSAGES} messages a run, concurrency ${CONCURRENCY}, ` +
        `${ROUNDS} alternated rounds, load ${loadavg()
          .map((l) => l.toFixed(2))
          .join(" ")}`,
    );
    const setups = [] as { name: string; store: InboxCore; counted: RoundTrips; row: Row }[];
    for (const holding of [false, true]) {
      const url = await server.createDatabase(holding ? "sbinbox_legacy_rows" : "sbinbox_legacy_empty");
      await migratedInbox(url, holding);
      const { pool, counted } = countingPool(url, CONCURRENCY);
      // pool.query (the store's reads outside a transaction) reaches the client with a callback, which the
      // counting client does not count: each is one statement and one round trip on a client of its own.
      const poolQuery = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
      (pool as { query: unknown }).query = (...args: unknown[]) => {
        counted.statements += 1;
        counted.roundTrips += 1;
        return poolQuery(...args);
      };
      const store = createPostgresInboxStore({ pool });
      // The consumer's registration and the legacy table's has-rows question, once a process: not in the counts.
      await store.process({ consumer: CONSUMER, messageId: randomUUID() }, nothing);
      if (!holding) await newMarkers(url);
      const name = holding ? `InboxLegacy holding ${LEGACY}` : "InboxLegacy empty";
      setups.push({ name, store, counted, row: { single: [], batched: [], old: [] } });
    }
    for (let round = 0; round < ROUNDS; round += 1) {
      for (const s of round % 2 === 0 ? setups : [...setups].reverse()) {
        s.row.single.push(await single(s.store, s.counted));
        s.row.batched.push(await batched(s.store, s.counted));
        s.row.old.push(await redeliveries(s.store, s.counted));
      }
    }
    const rows: string[][] = [];
    for (const s of setups) {
      for (const [path, figures] of Object.entries(s.row) as [keyof Row, Figures[]][]) {
        const m = (k: keyof Figures) => median(figures.map((f) => f[k]));
        const label = {
          single: "fresh, one a transaction",
          batched: `fresh, batches of ${BATCH}`,
          old: "redelivery of a processed one",
        }[path];
        rows.push([
          s.name,
          label,
          m("statements").toFixed(2),
          m("roundTrips").toFixed(2),
          m("cpuUs").toFixed(0),
          // The rounds' spread: CPU on two shared cores moves with the load, the counts do not.
          `${Math.min(...figures.map((f) => f.cpuUs)).toFixed(0)}-${Math.max(...figures.map((f) => f.cpuUs)).toFixed(0)}`,
        ]);
      }
    }
    for (const line of formatTable(
      ["inbox", "messages", "statements", "round trips", "CPU µs", "rounds' CPU min-max"],
      rows,
    ))
      console.log(line);
    console.log(
      `(a redelivery's marker is in InboxLegacy where it holds rows, in the new table where it is empty; CPU is ` +
        `this process's, a message; load ${loadavg()[0]!.toFixed(2)})`,
    );
    for (const s of setups) await s.store.close();
  } finally {
    await server.dispose();
  }
}

await main();
