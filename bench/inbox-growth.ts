// `npm run bench:inbox-growth`: what an inbox costs as it grows past memory, on an embedded PostgreSQL run with a
// small shared_buffers (128 MB unless told) so the inbox does not fit. At each size it reports bytes per marker (the
// table and each index), buffer pages read and hit per marker insert and per duplicate check (pg_stat_statements,
// per statement; pg_statio_user_indexes, per index), and the rates. Counts first: the rates depend on the machine.
//
// The fill is bulk (INSERT ... SELECT over generate_series, secondary indexes dropped and built again) so 50 million
// markers take minutes; the measured inserts and checks then go through the worker's own statements.
//
//   --sizes 0,10000000,50000000   sizes to measure at, ascending
//   --keys name|time              name: the publisher's name-based UUIDv5 ids (random order); time: UUIDv7 ids
//                                 (time-ordered, as an id issued at enqueue time would be)
//   --schema compact|0001         compact: the marker the worker writes (migrations 0001 + 0002); 0001: the marker
//                                 before 0002, for comparison (see bench/inbox-growth-schema.ts)
//   --measure 20000               inserts and duplicate checks measured per size
//   --warmup 60000                inserts before the measured ones, counted as a window of their own: the fill ends
//                                 with a CHECKPOINT and a cold cache; the warm-up reloads it (at least 2-3 x the
//                                 cache's pages, 16,384 at 128 MB), so the measured window shows the steady state
//   --concurrency 8               lanes issuing them
//   --shared-buffers 128MB        PostgreSQL's buffer cache
//   --server pg|tds               tds: a TDS server instead (the SQL Server migrations 0001 + 0002), see
//                                 bench/inbox-growth-tds.ts
//   --tds <connection string>     for --server tds; default SBINBOX_TEST_MSSQL
//   --tds-fill bulk|worker        for --server tds: bulk (the default), a set-based INSERT ... SELECT in T-SQL, its
//                                 ids the MD5 of the publisher's name `OrderPlaced:<n>` as a UUID (random like the
//                                 publisher's UUIDv5, and computable with HASHBYTES, which a UUIDv5's version bits
//                                 are not on Babelfish); worker: the worker's own batch insert with the publisher's
//                                 ids, about 19,000 markers a second
//
// Disk and time (docs/benchmark.md): the data folder (sbinbox-pg-* under the OS temp folder, which is a tmpfs on
// some desktops: set TMPDIR to a disk) takes up to ~25 GB at 50 M markers of 0001 (12 GB of data, the WAL up to
// max_wal_size 16 GB), about half that on the compact schema; it is removed at the end and on Ctrl-C.
import { createHash } from "node:crypto";
import { availableParallelism, loadavg } from "node:os";
import { parseArgs } from "node:util";
import pg from "pg";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { MESSAGE_ID_NAMESPACE, deriveMessageId } from "../src/servicebus/message-id.ts";
import { formatTable, inBareTransaction } from "./common.ts";
import { runTds } from "./inbox-growth-tds.ts";
import {
  schemaUnderTest,
  type KeyKind,
  type SchemaName,
  type SchemaUnderTest,
} from "./inbox-growth-schema.ts";

const { values: args } = parseArgs({
  options: {
    sizes: { type: "string", default: "0,10000000,50000000" },
    keys: { type: "string", default: "name" },
    schema: { type: "string", default: "compact" },
    measure: { type: "string", default: "20000" },
    warmup: { type: "string", default: "60000" },
    concurrency: { type: "string", default: "8" },
    "shared-buffers": { type: "string", default: "128MB" },
    server: { type: "string", default: "pg" },
    tds: { type: "string", default: process.env.SBINBOX_TEST_MSSQL ?? "" },
    "tds-fill": { type: "string", default: "bulk" },
  },
});
const SIZES = args.sizes.split(",").map((s) => Number(s.trim()));
const MEASURE = Number(args.measure);
const CONCURRENCY = Number(args.concurrency);
const WARMUP = Number(args.warmup);
const FILL_CHUNK = 5_000_000;
/** Markers a second the fill's ReceivedUtc (and a UUIDv7's time) advance by: 1,000 a second, 1 ms apart. */
const BASE_MS = Date.UTC(2026, 0, 1);
const EVENT_TYPE = "OrderPlaced";
const CONSUMER = "orders-service";
/** A redelivery is usually recent: the last this many markers are the "recent" duplicate checks' range. */
const RECENT = 100_000;

for (const [name, ok] of [
  ["--sizes", SIZES.every((n, i) => Number.isInteger(n) && n >= 0 && (i === 0 || n > SIZES[i - 1]!))],
  ["--measure", Number.isInteger(MEASURE) && MEASURE > 0],
  ["--warmup", Number.isInteger(WARMUP) && WARMUP >= 0],
  ["--concurrency", Number.isInteger(CONCURRENCY) && CONCURRENCY > 0],
  ["--keys", args.keys === "name" || args.keys === "time"],
  ["--schema", args.schema === "0001" || args.schema === "compact"],
  ["--server", args.server === "pg" || (args.server === "tds" && args.tds !== "" && args.keys === "name")],
  ["--tds-fill", args["tds-fill"] === "bulk" || args["tds-fill"] === "worker"],
] as const) {
  if (!ok)
    throw new Error(`bench:inbox-growth: bad ${name} (see the comment at the top of bench/inbox-growth.ts)`);
}
const KEYS = args.keys as KeyKind;

/** The id of the g-th marker, as the fill's SQL makes it (checked against it before anything is measured). */
function messageId(g: number): string {
  if (KEYS === "name") return deriveMessageId(EVENT_TYPE, String(g));
  const h = (BASE_MS + g).toString(16).padStart(12, "0");
  const r = createHash("md5").update(String(g)).digest("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-7${r.slice(0, 3)}-8${r.slice(3, 6)}-${r.slice(6, 18)}`;
}

/** The id of the g-th marker of a TDS bulk fill: MD5 of the publisher's name, as a canonical UUID. */
function hashMessageId(g: number): string {
  const h = createHash("md5").update(`${EVENT_TYPE}:${g}`).digest("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** The same ids in SQL, over a column `g`; `r` and `h` come from the fill's LATERAL. */
function messageIdSql(): string {
  if (KEYS === "name")
    return `uuid_generate_v5('${MESSAGE_ID_NAMESPACE}'::uuid, '${EVENT_TYPE}:' || g)::text`;
  return `substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 1, 3) || '-8' || substr(r, 4, 3) || '-' || substr(r, 7, 12)`;
}

/** A small seeded generator (mulberry32), so every run checks the same duplicates. */
function seeded(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Runs `count` operations on `concurrency` lanes; returns operations per second. */
async function rate(count: number, op: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < count; i = next++) await op(i);
    }),
  );
  return count / (Number(process.hrtime.bigint() - started) / 1e9);
}

const log = (line: string) => process.stdout.write(`${line}\n`);
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");

interface Counts {
  calls: number;
  read: number;
  hit: number;
  /** Pages this statement dirtied: each is written back later (checkpoint or eviction), a write IOPS costs too. */
  dirtied: number;
}

/** A statement text with its parameters and constants as pg_stat_statements shows them ($n), both as "?". */
const normalized = (text: string) => text.replace(/\$\d+|\b\d+\b/g, "?");

/** pg_stat_statements' shared buffer counts for one statement (its constants normalised) since the last reset. */
async function statementCounts(admin: pg.Pool, text: string): Promise<Counts> {
  const r = await admin.query<{ query: string; calls: string; read: string; hit: string; dirtied: string }>(
    `SELECT query, calls, shared_blks_read AS read, shared_blks_hit AS hit, shared_blks_dirtied AS dirtied
FROM pg_stat_statements`,
  );
  const rows = r.rows.filter((row) => normalized(row.query) === normalized(text));
  const sum = (k: "calls" | "read" | "hit" | "dirtied") => rows.reduce((s, row) => s + Number(row[k]), 0);
  return { calls: sum("calls"), read: sum("read"), hit: sum("hit"), dirtied: sum("dirtied") };
}

/** Blocks read and hit per relation of the inbox (its heap and each index), as pg_statio counts them. */
async function relationCounts(
  admin: pg.Pool,
  table: string,
): Promise<Map<string, { read: number; hit: number }>> {
  const r = await admin.query<{ name: string; read: string; hit: string }>(
    `SELECT relname AS name, heap_blks_read AS read, heap_blks_hit AS hit FROM pg_statio_user_tables WHERE relname = $1
UNION ALL
SELECT indexrelname, idx_blks_read, idx_blks_hit FROM pg_statio_user_indexes WHERE relname = $1`,
    [table],
  );
  return new Map(r.rows.map((row) => [row.name, { read: Number(row.read), hit: Number(row.hit) }]));
}

/** Bytes on disk of the inbox table and each of its indexes. */
async function relationSizes(admin: pg.Pool, table: string): Promise<[string, number][]> {
  const r = await admin.query<{ name: string; bytes: string }>(
    `SELECT $1::text AS name, pg_relation_size(format('%I', $1::text)) AS bytes
UNION ALL
SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = format('%I', $1::text)::regclass ORDER BY 1`,
    [table],
  );
  return r.rows.map((row) => [row.name, Number(row.bytes)]);
}

/** A bulk fill from marker `from` to `to`: secondary indexes dropped, rows inserted in chunks, indexes rebuilt. */
async function bulkFill(admin: pg.Pool, schema: SchemaUnderTest, from: number, to: number): Promise<void> {
  if (to <= from) return;
  const started = Date.now();
  const defs = await admin.query<{ name: string; def: string }>(
    `SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = format('%I', $1::text)::regclass AND NOT i.indisprimary`,
    [schema.table],
  );
  for (const { name } of defs.rows) await admin.query(`DROP INDEX "${name}"`);
  const fill = schema.fillSql(messageIdSql());
  for (let a = from; a < to; a += FILL_CHUNK) {
    const b = Math.min(to, a + FILL_CHUNK);
    await admin.query(fill, [a, b, BASE_MS]);
    log(
      `  filled ${b.toLocaleString("en")} (${((Date.now() - started) / 1000).toFixed(0)} s, load ${load()})`,
    );
  }
  for (const { name, def } of defs.rows) {
    await admin.query(def);
    log(`  built ${name} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
  }
  await admin.query(`ANALYZE "${schema.table}"`);
  await admin.query("CHECKPOINT");
}

interface Phase {
  rate: number;
  counts: Counts;
  perRelation: Map<string, { read: number; hit: number }>;
}

/** Runs `count` operations on a fresh pool, counting what the statement `text` read and hit. */
async function measured(
  url: string,
  admin: pg.Pool,
  schema: SchemaUnderTest,
  text: string,
  count: number,
  op: (pool: pg.Pool, i: number) => Promise<void>,
): Promise<Phase> {
  const pool = new pg.Pool({ connectionString: url, max: CONCURRENCY });
  await admin.query("SELECT pg_stat_statements_reset()");
  const before = await relationCounts(admin, schema.table);
  const ops = await rate(count, (i) => op(pool, i));
  // A backend hands its pg_statio counts over when it exits: end the pool, then give the exits a moment.
  await pool.end();
  await new Promise((r) => setTimeout(r, 1500));
  const after = await relationCounts(admin, schema.table);
  const perRelation = new Map(
    [...after].map(([name, a]) => {
      const b = before.get(name) ?? { read: 0, hit: 0 };
      return [name, { read: a.read - b.read, hit: a.hit - b.hit }];
    }),
  );
  const counts = await statementCounts(admin, text);
  if (counts.calls !== count)
    throw new Error(`bench: pg_stat_statements counted ${counts.calls} of ${count} calls`);
  return { rate: ops, counts, perRelation };
}

/** Checks the SQL fill and the JS ids agree (else the measured duplicates would not be duplicates). */
async function checkIds(admin: pg.Pool): Promise<void> {
  const r = await admin.query<{ id: string }>(
    `SELECT ${messageIdSql()} AS id FROM (VALUES (7::bigint)) AS v(g),
LATERAL (SELECT md5(g::text) AS r, lpad(to_hex($1::bigint + g), 12, '0') AS h) AS x`,
    [BASE_MS],
  );
  if (r.rows[0]!.id !== messageId(7))
    throw new Error(`bench: SQL id ${r.rows[0]!.id} is not ${messageId(7)}`);
}

const per = (n: number, d: number) => (d === 0 ? "-" : (n / d).toFixed(2));

interface Run {
  url: string;
  admin: pg.Pool;
  schema: SchemaUnderTest;
  random: () => number;
  /** Markers 0 .. next-1 exist. */
  next: number;
}

/** The worker's marker insert of marker `g`, in its own transaction. */
const insertMarker = (run: Run, pool: pg.Pool, g: number) =>
  inBareTransaction(pool, (c) =>
    c.query(run.schema.insertSql, run.schema.params(messageId(g))).then(() => undefined),
  );

/** The worker's duplicate check of marker `g`, which exists. */
const checkMarker = (run: Run, pool: pg.Pool, g: number) =>
  pool.query(run.schema.isProcessedSql, run.schema.params(messageId(g))).then((r) => {
    if (r.rows.length !== 1) throw new Error(`bench: marker ${g} (${messageId(g)}) not found as processed`);
  });

/** `count` markers picked at random among the last `span` (all of them when `span` is Infinity). */
function pick(run: Run, count: number, span: number): number[] {
  const from = Math.max(0, run.next - span);
  return Array.from({ length: count }, () => from + Math.floor(run.random() * (run.next - from)));
}

/** Fills to `size`, then measures inserts, any-age checks and recent checks there; returns the table rows. */
async function measureAt(run: Run, size: number): Promise<{ row: string[]; perRelation: string[][] }> {
  const { url, admin, schema } = run;
  log(`size ${size.toLocaleString("en")}: filling from ${run.next.toLocaleString("en")} (load ${load()})`);
  await bulkFill(admin, schema, run.next, size);
  run.next = Math.max(run.next, size);
  const sizes = await relationSizes(admin, schema.table);
  const rows = run.next;
  // The first window reloads the cache the fill's CHECKPOINT left cold (and warms the plans); only its reads per
  // insert are shown, beside the second, measured window.
  const warm = run.next;
  const first =
    WARMUP === 0
      ? undefined
      : await measured(url, admin, schema, schema.insertSql, WARMUP, (p, i) =>
          insertMarker(run, p, warm + i),
        );
  run.next += WARMUP;
  if (first)
    log(
      `  warm-up window, ${WARMUP.toLocaleString("en")} inserts: ${per(first.counts.read, WARMUP)} read, ` +
        `${per(first.counts.hit, WARMUP)} hit per insert (not in the table below)`,
    );
  const base = run.next;
  const ins = await measured(url, admin, schema, schema.insertSql, MEASURE, (p, i) =>
    insertMarker(run, p, base + i),
  );
  run.next += MEASURE;
  const anyIds = pick(run, MEASURE, Infinity);
  const dupAny = await measured(url, admin, schema, schema.isProcessedSql, MEASURE, (p, i) =>
    checkMarker(run, p, anyIds[i]!),
  );
  const recentIds = pick(run, MEASURE, RECENT);
  const dupRecent = await measured(url, admin, schema, schema.isProcessedSql, MEASURE, (p, i) =>
    checkMarker(run, p, recentIds[i]!),
  );
  // An empty inbox has no bytes per marker; the markers its measured inserts wrote show the worker's own.
  const grown = size === 0 ? await relationSizes(admin, schema.table) : undefined;
  const total = (grown ?? sizes).reduce((sum, [, b]) => sum + b, 0);
  const row = [
    rows.toLocaleString("en"),
    grown ? `${(total / (WARMUP + MEASURE)).toFixed(0)} grown` : (total / rows).toFixed(0),
    per(ins.counts.read, MEASURE),
    per(ins.counts.hit, MEASURE),
    per(ins.counts.dirtied, MEASURE),
    ins.rate.toFixed(0),
    per(dupAny.counts.read, MEASURE),
    per(dupAny.counts.hit, MEASURE),
    dupAny.rate.toFixed(0),
    per(dupRecent.counts.read, MEASURE),
    per(dupRecent.counts.hit, MEASURE),
    load(),
  ];
  const perRelation = sizes.map(([name, bytes]) => {
    const i = ins.perRelation.get(name) ?? { read: 0, hit: 0 };
    const d = dupAny.perRelation.get(name) ?? { read: 0, hit: 0 };
    return [
      rows.toLocaleString("en"),
      name,
      (bytes / 2 ** 20).toFixed(0),
      grown
        ? `${((grown.find(([n]) => n === name)?.[1] ?? 0) / (WARMUP + MEASURE)).toFixed(1)} grown`
        : (bytes / rows).toFixed(1),
      per(i.read, MEASURE),
      per(i.hit, MEASURE),
      per(d.read, MEASURE),
      per(d.hit, MEASURE),
    ];
  });
  return { row, perRelation };
}

async function main(): Promise<void> {
  const settings = {
    shared_buffers: args["shared-buffers"],
    shared_preload_libraries: "pg_stat_statements",
    // Off so its passes do not land in the counts; the fill runs ANALYZE itself.
    autovacuum: "off",
    maintenance_work_mem: "1GB",
    max_wal_size: "16GB",
    checkpoint_timeout: "30min",
  };
  const server = await EmbeddedPostgresServer.create({ settings });
  // Ctrl-C: stop the server and remove its data folder (tens of GB at 50 M) rather than leave it behind.
  process.once("SIGINT", () => {
    log("\ninterrupted: removing the data folder");
    void server.dispose().finally(() => process.exit(130));
  });
  const results: string[][] = [];
  const relRows: string[][] = [];
  try {
    const url = await server.createDatabase("sbinbox_growth");
    const admin = new pg.Pool({ connectionString: url, max: 2 });
    admin.on("error", () => undefined);
    await admin.query('CREATE EXTENSION IF NOT EXISTS "uuid-ossp"');
    await admin.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    const schema = schemaUnderTest(args.schema as SchemaName);
    await schema.setup(url, admin, CONSUMER);
    await checkIds(admin);
    log(
      `inbox growth: schema ${schema.name}, ${KEYS} keys, shared_buffers ${settings.shared_buffers}, ` +
        `${MEASURE} measured per size at concurrency ${CONCURRENCY}, ${availableParallelism()} cores, load ${load()}`,
    );
    const run: Run = { url, admin, schema, random: seeded(41), next: 0 };
    for (const size of SIZES) {
      const { row, perRelation } = await measureAt(run, size);
      results.push(row);
      relRows.push(...perRelation);
      log(formatTable(HEADER, [row]).join("\n"));
    }
    const next = run.next;
    // The measured inserts grew the table by random (or ordered) inserts: their bytes show an index as the worker
    // grows it, against the bulk-built (packed) index of the fill.
    const grown = await relationSizes(admin, schema.table);
    log(
      `\nafter the last size, ${next.toLocaleString("en")} markers: ${grown.map(([n, b]) => `${n} ${(b / next).toFixed(1)} B`).join(", ")}`,
    );
    log(
      `\nper size (bytes per marker counts the table and every index; pages are 8 KiB; per insert / per check):`,
    );
    log(formatTable(HEADER, results).join("\n"));
    log(
      `\nper relation (MiB, bytes per marker; pg_statio blocks read and hit per insert and per any-age check):`,
    );
    log(
      formatTable(
        ["markers", "relation", "MiB", "B/marker", "ins read", "ins hit", "dup read", "dup hit"],
        relRows,
      ).join("\n"),
    );
    log(
      `\nthe table's inserts are the second window, after a warm-up of ${WARMUP.toLocaleString("en")}; ` +
        `read = a shared-buffer miss (served by the OS cache or the disk: PostgreSQL cannot tell which); ` +
        `duplicate checks are the worker's isProcessed read of a marker that exists, at any age or among the last ` +
        `${RECENT.toLocaleString("en")}; inserts are the worker's insertProcessedMarker in its own transaction`,
    );
    await admin.end();
  } finally {
    await server.dispose();
  }
}

const HEADER = [
  "markers",
  "B/marker",
  "ins read",
  "ins hit",
  "ins dirtied",
  "ins/s",
  "dup read",
  "dup hit",
  "dup/s",
  "recent read",
  "recent hit",
  "load",
];

if (args.server === "tds") {
  await runTds({
    connectionString: args.tds,
    sizes: SIZES,
    measure: MEASURE,
    warmup: WARMUP,
    concurrency: CONCURRENCY,
    consumer: CONSUMER,
    fill: args["tds-fill"] as "bulk" | "worker",
    messageId: args["tds-fill"] === "bulk" ? hashMessageId : messageId,
    random: seeded(41),
    rate,
    log,
    load,
  });
} else {
  await main();
}
