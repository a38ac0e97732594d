// `npm run bench:inbox-size`: bytes per marker on the embedded PostgreSQL, the schema before migration 0002
// against the one after it (issue 41, item 3). SBINBOX_BENCH_MARKERS markers (default 10,000, random UUID
// MessageIds as crypto.randomUUID and the publisher's name-based ids give) are written in batches of 32, the
// worker's way: through the store's batch path after 0002, through 0001's own batch insert before it. Then every
// table of the inbox with its indexes, by pg_total_relation_size, and each relation apart. A benchmark, not a test.
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { loadavg } from "node:os";
import pg from "pg";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { createPostgresInboxStore, POSTGRES_MIGRATIONS_DIR } from "../src/inbox/postgres/adapter.ts";
import { postgresSql } from "../src/inbox/postgres/statements.ts";
import { formatTable } from "./common.ts";

const MARKERS = Number(process.env.SBINBOX_BENCH_MARKERS ?? 10_000);
const BATCH = 32;
/** random: crypto.randomUUID; ordered: UUIDv7 (a millisecond time first), the order item 4 of issue 41 weighs. */
const IDS = process.env.SBINBOX_BENCH_IDS === "ordered" ? "ordered" : "random";
let sequence = 0;

/** A UUIDv7 as RFC 9562 lays it out: 48 bits of Unix milliseconds, the version, then random bits. */
function orderedUuid(): string {
  const hex = (BigInt(Date.now()) * 4096n + BigInt(sequence++ % 4096)).toString(16).padStart(15, "0");
  const rest = randomUUID().replaceAll("-", "").slice(15);
  const raw = `${hex.slice(0, 12)}7${hex.slice(12, 15)}${rest.slice(0, 16)}`;
  return `${raw.slice(0, 8)}-${raw.slice(8, 12)}-${raw.slice(12, 16)}-${raw.slice(16, 20)}-${raw.slice(20, 32)}`;
}

const newId = (): string => (IDS === "ordered" ? orderedUuid() : randomUUID());
const CONSUMER = "orders";
/** 0001's batch insert, as the worker sent it before 0002. */
const INSERT_0001 = `INSERT INTO "Inbox" ("MessageId", "Consumer", "ProcessedUtc")
SELECT m, $2, now() FROM unnest($1::varchar[]) AS m ORDER BY m
ON CONFLICT ("MessageId", "Consumer") DO NOTHING RETURNING "MessageId" AS id`;

/**
 * Every relation of the inbox's tables, fork by fork: each table, its TOAST table and that one's index, and its
 * indexes. `owner` is the table a relation belongs to, so the small tables' fixed pages can be told apart; `role`
 * is what a relation is (the table, its primary key, a unique or plain index over every row, a partial index over
 * some, TOAST), read from the catalog, so the part that grows is told by role, not by a name of one migration.
 */
const FORKS = `WITH t AS (
  SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = 'public' AND c.relkind = 'r'
), rel AS (
  SELECT t.relname AS owner, t.oid, t.relname AS name, 'table' AS kind, 'table' AS role FROM t
  UNION ALL SELECT t.relname, c.reltoastrelid, 'toast', 'toast', 'toast' FROM t JOIN pg_class c ON c.oid = t.oid
    WHERE c.reltoastrelid <> 0
  UNION ALL SELECT t.relname, i.indexrelid, 'toast index', 'toast', 'toast' FROM t JOIN pg_class c ON c.oid = t.oid
    JOIN pg_index i ON i.indrelid = c.reltoastrelid
  UNION ALL SELECT t.relname, i.indexrelid, (SELECT x.relname FROM pg_class x WHERE x.oid = i.indexrelid), 'index',
    CASE WHEN i.indisprimary THEN 'primary key' WHEN i.indpred IS NOT NULL THEN 'partial'
      WHEN i.indisunique THEN 'unique' ELSE 'index' END FROM t
    JOIN pg_index i ON i.indrelid = t.oid
)
SELECT owner, name, kind, role, pg_relation_size(oid, 'main')::bigint AS main, pg_relation_size(oid, 'fsm')::bigint AS fsm,
  pg_relation_size(oid, 'vm')::bigint AS vm, pg_total_relation_size(oid)::bigint AS total
FROM rel ORDER BY owner <> 'Inbox', owner, kind DESC, name`;

interface Fork {
  owner: string;
  name: string;
  kind: string;
  role: string;
  main: string;
  fsm: string;
  vm: string;
  total: string;
}

/** pgstattuple's view of the inbox table's heap and pgstatindex's of each of its B-trees: fill and free bytes. */
const HEAP_STATS = `SELECT tuple_count, tuple_len, dead_tuple_len, free_space, table_len FROM pgstattuple('"Inbox"')`;
const INDEX_STATS = `SELECT (SELECT x.relname FROM pg_class x WHERE x.oid = i.indexrelid) AS name, s.leaf_pages, s.internal_pages, s.empty_pages,
  s.avg_leaf_density FROM pg_index i CROSS JOIN LATERAL pgstatindex(i.indexrelid) s
WHERE i.indrelid = '"Inbox"'::regclass ORDER BY name`;

async function measure(url: string): Promise<Fork[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<Fork>(FORKS)).rows;
  } finally {
    await client.end();
  }
}

async function fillStats(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query("CREATE EXTENSION IF NOT EXISTS pgstattuple");
    const heap = (await client.query(HEAP_STATS)).rows[0] as Record<string, string>;
    const perTuple = Number(heap.tuple_len) / Number(heap.tuple_count);
    console.log(
      `  heap (pgstattuple): ${heap.tuple_count} rows, ${perTuple.toFixed(1)} B a row with its header, ` +
        `${heap.free_space} B free in ${Number(heap.table_len) / 8192} pages (${(Number(heap.free_space) / MARKERS).toFixed(1)} a marker)`,
    );
    for (const r of (await client.query(INDEX_STATS)).rows as Record<string, string>[])
      console.log(
        `  ${r.name} (pgstatindex): ${r.leaf_pages} leaf, ${r.internal_pages} inner, ${r.empty_pages} empty pages, ` +
          `leaves ${r.avg_leaf_density}% full`,
      );
  } finally {
    await client.end();
  }
}

async function before0002(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const sql = postgresSql();
    await client.query(sql.CREATE_VERSION_TABLE);
    await client.query(await readFile(join(POSTGRES_MIGRATIONS_DIR, "0001_inbox.sql"), "utf8"));
    await client.query(sql.RECORD_VERSION, [1, "0001_inbox"]);
    for (let done = 0; done < MARKERS; done += BATCH) {
      const ids = Array.from({ length: Math.min(BATCH, MARKERS - done) }, newId);
      await client.query(INSERT_0001, [ids, CONSUMER]);
    }
  } finally {
    await client.end();
  }
}

async function after0002(url: string): Promise<void> {
  const store = createPostgresInboxStore({ url, maxConnections: 2, preCheck: false });
  try {
    await store.migrate();
    for (let done = 0; done < MARKERS; done += BATCH) {
      const items = Array.from({ length: Math.min(BATCH, MARKERS - done) }, () => ({
        messageId: newId(),
        work: () => Promise.resolve(),
        firstDelivery: true,
      }));
      const result = await store.processBatch(CONSUMER, items);
      if (result.failure !== undefined)
        throw new Error("bench:inbox-size: a batch failed", { cause: result.failure });
    }
  } finally {
    await store.close();
  }
}

/** Prints every relation and fork; returns the inbox's total and the part of it that grows with the markers. */
function report(label: string, forks: readonly Fork[]): { total: number; fixed: number } {
  const total = forks.reduce((sum, f) => sum + Number(f.total) * (f.kind === "table" ? 1 : 0), 0);
  // Fixed: the pages that do not grow with the markers (the small tables, the maps' first pages, TOAST, and the
  // partial open-claims index, empty here). What grows: the inbox table and each of its indexes over every row
  // (0001's unique and ReceivedUtc indexes as well as 0002's unique index, and the primary key).
  const grows = (f: Fork) => f.owner === "Inbox" && f.role !== "toast" && f.role !== "partial";
  const growing = forks.filter(grows).reduce((sum, f) => sum + Number(f.main), 0);
  const fixed = total - growing;
  console.log(
    `${label}: ${(total / MARKERS).toFixed(1)} bytes a marker (${total} bytes, every table with its indexes); ` +
      `the main forks of the table and its indexes over every row ${(growing / MARKERS).toFixed(1)}, the rest ` +
      `${(fixed / MARKERS).toFixed(1)} (${fixed} bytes)`,
  );
  const rows = forks.map((f) => [
    f.owner,
    f.name,
    f.role,
    f.main,
    f.fsm,
    f.vm,
    (Number(f.main) / MARKERS).toFixed(2),
    ((Number(f.fsm) + Number(f.vm)) / MARKERS).toFixed(2),
  ]);
  const header = ["table", "relation", "role", "main B", "fsm B", "vm B", "main / marker", "fsm+vm / marker"];
  for (const line of formatTable(header, rows)) console.log(`  ${line}`);
  return { total, fixed };
}

async function main(): Promise<void> {
  const server = await EmbeddedPostgresServer.create();
  try {
    console.log(
      `bench:inbox-size: ${MARKERS} markers with ${IDS} UUIDs, batches of ${BATCH}, load ${loadavg()[0]!.toFixed(2)}`,
    );
    const old = await server.createDatabase("sbinbox_size_0001");
    await before0002(old);
    const a = report("0001 (before)", await measure(old)).total;
    const now = await server.createDatabase("sbinbox_size_0002");
    await after0002(now);
    const b = report("0002 (after)", await measure(now)).total;
    await fillStats(now);
    console.log(`after / before: ${(b / a).toFixed(3)} (target <= 0.5), load ${loadavg()[0]!.toFixed(2)}`);
  } finally {
    await server.dispose();
  }
}

await main();
