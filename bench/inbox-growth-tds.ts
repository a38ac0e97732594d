// bench/inbox-growth.ts --server tds: the same growth counts on a TDS server (SQL Server, or Babelfish at
// /work/shared/babelfish), through the SQL Server migration and the worker's SQL Server statements.
//
// Pages come from SET STATISTICS IO on SQL Server (logical and physical reads, per statement, from the info
// messages) and from BABELFISH_STATISTICS PROFILE with explain_buffers on Babelfish (which ignores STATISTICS IO):
// shared hit and read of the statement's plan. Both are sampled on a few hundred statements, since they cost a round
// trip of text each. Sizes come from sys.dm_db_partition_stats on SQL Server, from pg_relation_size on Babelfish;
// the unique index's leaf fill from sys.dm_db_index_physical_stats on SQL Server only.
import mssql from "mssql";
import { bindParameters, createSqlServerInboxStore } from "../src/inbox/sqlserver/adapter.ts";
import { batchStatements, statements } from "../src/inbox/sqlserver/statements.ts";
import { messageKey } from "../src/inbox/message-key.ts";
import { formatTable } from "./common.ts";

export interface TdsRun {
  connectionString: string;
  sizes: readonly number[];
  measure: number;
  /** Inserts before the timed and sampled ones at each size, to reload the cache the fill left (not counted). */
  warmup: number;
  concurrency: number;
  consumer: string;
  /** bulk: INSERT ... SELECT in T-SQL, ids by HASHBYTES (messageId must be bulkMessageKey's); worker: batch inserts. */
  fill: "bulk" | "worker";
  messageId: (g: number) => string;
  random: () => number;
  rate: (count: number, op: (i: number) => Promise<void>) => Promise<number>;
  log: (line: string) => void;
  load: () => string;
}

const SAMPLED = 300;
/** Rows a fill statement inserts: the worker's batch insert at its largest. */
const FILL_ROWS = 1000;

/** SQL Server or Babelfish: Babelfish says so in @@VERSION. */
async function isBabelfish(pool: mssql.ConnectionPool): Promise<boolean> {
  const r = await pool.request().query<{ v: string }>("SELECT @@VERSION AS v");
  return r.recordset[0]!.v.includes("Babelfish");
}

/** Bytes of the inbox's table (its clustered index) and each nonclustered index. */
async function sizes(pool: mssql.ConnectionPool, babelfish: boolean): Promise<[string, number][]> {
  if (babelfish) {
    // Babelfish keeps dbo.Inbox of database D as the PostgreSQL table D_dbo.inbox; its index names are hashed.
    const r = await pool.request().query<{ name: string; bytes: string }>(
      `SELECT CAST(c.relname AS varchar(200)) AS name, CAST(pg_relation_size(c.oid) AS bigint) AS bytes
FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
WHERE s.nspname = CONCAT(DB_NAME(), '_dbo') AND (c.relname = 'inbox' OR c.oid IN (
  SELECT indexrelid FROM pg_index WHERE indrelid = (SELECT t.oid FROM pg_class t WHERE t.relname = 'inbox' AND t.relnamespace = s.oid)))
ORDER BY name`,
    );
    // Babelfish names an index by its name, the table's and a hash: keep the name.
    return r.recordset.map((row) => [
      row.name.replace(/(?:i|in|inb|inbo|inbox)?[0-9a-f]{32}$/, ""),
      Number(row.bytes),
    ]);
  }
  const r = await pool.request().query<{ name: string; bytes: number }>(
    `SELECT i.name AS name, SUM(p.used_page_count) * 8192 AS bytes FROM sys.dm_db_partition_stats p
JOIN sys.indexes i ON i.object_id = p.object_id AND i.index_id = p.index_id
WHERE p.object_id = OBJECT_ID('dbo.Inbox') GROUP BY i.name ORDER BY i.name`,
  );
  return r.recordset.map((row) => [row.name, Number(row.bytes)]);
}

/**
 * The unique index's leaf fill on SQL Server (sys.dm_db_index_physical_stats, DETAILED: every page is read once),
 * so a run shows whether the fill grew its leaves as the worker does (about 69 % for random keys) or packed them.
 * The index is found by its role (unique, not the primary key), not by its name. Babelfish has no such function
 * ("function sys.dm_db_index_physical_stats(...) does not exist", error 33557097): null there.
 */
async function uniqueLeafFill(pool: mssql.ConnectionPool, babelfish: boolean): Promise<number | null> {
  if (babelfish) return null;
  const r = await pool.request().query<{ fill: number | null }>(
    `SELECT s.avg_page_space_used_in_percent AS fill
FROM sys.indexes i CROSS APPLY sys.dm_db_index_physical_stats(DB_ID(), i.object_id, i.index_id, NULL, 'DETAILED') s
WHERE i.object_id = OBJECT_ID('dbo.Inbox') AND i.is_unique = 1 AND i.is_primary_key = 0 AND s.index_level = 0`,
  );
  return r.recordset[0]?.fill ?? null;
}

interface Pages {
  read: number;
  hit: number;
}

/** Runs one statement with its page counts on: SQL Server's STATISTICS IO messages, Babelfish's plan buffers. */
async function counted(
  pool: mssql.ConnectionPool,
  babelfish: boolean,
  sql: string,
  params: unknown[],
): Promise<Pages> {
  const pages = { read: 0, hit: 0 };
  const request = bindParameters(pool.request(), params);
  if (babelfish) {
    // explain_buffers is a session setting: set it in the same batch, whichever pooled connection runs it.
    const r = await request.query(
      `SELECT set_config('babelfishpg_tsql.explain_buffers', 'on', false) AS buffers; SET BABELFISH_STATISTICS PROFILE ON; ${sql} SET BABELFISH_STATISTICS PROFILE OFF;`,
    );
    const plan = (r.recordsets as unknown as { "QUERY PLAN"?: string }[][]).flat();
    // The top node's Buffers line counts its children's too: take the first one.
    const line = plan.map((row) => row["QUERY PLAN"] ?? "").find((l) => l.trim().startsWith("Buffers:"));
    pages.hit = Number(/hit=(\d+)/.exec(line ?? "")?.[1] ?? 0);
    pages.read = Number(/read=(\d+)/.exec(line ?? "")?.[1] ?? 0);
    return pages;
  }
  request.on("info", (info: { message: string }) => {
    const m = /logical reads (\d+), physical reads (\d+).*?read-ahead reads (\d+)/.exec(info.message);
    if (m) {
      // A read-ahead page is read into the pool and then counted among the logical reads: not a hit.
      const read = Number(m[2]) + Number(m[3]);
      pages.hit += Math.max(0, Number(m[1]) - read);
      pages.read += read;
    }
  });
  await request.query(`SET STATISTICS IO ON; ${sql} SET STATISTICS IO OFF;`);
  return pages;
}

/** Fills, then at each size measures the worker's marker insert and duplicate check. */
export async function runTds(run: TdsRun): Promise<void> {
  const pool = await new mssql.ConnectionPool(run.connectionString).connect();
  const database = `sbinbox_growth_${process.pid}`;
  await pool.request().query(`CREATE DATABASE ${database}`);
  const dbPool = await new mssql.ConnectionPool(`${run.connectionString};Database=${database}`).connect();
  let babelfish = false;
  try {
    const store = createSqlServerInboxStore({ pool: dbPool });
    await store.migrate();
    await bindParameters(dbPool.request(), [run.consumer]).query(statements.registerConsumer);
    babelfish = await isBabelfish(dbPool);
    if (babelfish) {
      const sb = await dbPool
        .request()
        .query<{ sb: string }>("SELECT current_setting('shared_buffers') AS sb");
      run.log(`Babelfish's shared_buffers: ${sb.recordset[0]!.sb}`);
    }
    run.log(
      `inbox growth on ${babelfish ? "Babelfish" : "SQL Server"}: migrations 0001 + 0002 (compact), ${run.fill === "bulk" ? "MD5 keys filled in T-SQL" : "name keys filled by the worker's batch insert"}, ${run.measure} measured ` +
        `per size at concurrency ${run.concurrency} (pages sampled on ${SAMPLED}), load ${run.load()}`,
    );
    const rows: string[][] = [];
    let next = 0;
    const params = (g: number) => [messageKey(run.messageId(g)), run.consumer];
    const insert = (g: number) =>
      bindParameters(dbPool.request(), params(g))
        .query(statements.insertProcessedMarker)
        .then(() => undefined);
    for (const size of run.sizes) {
      next =
        run.fill === "bulk"
          ? await bulkFill(run.connectionString, database, run, next, size)
          : await fill(dbPool, run, next, size);
      const bytes = await sizes(dbPool, babelfish);
      const leafFill = await uniqueLeafFill(dbPool, babelfish);
      const markers = next;
      const warm = next;
      await run.rate(run.warmup, (i) => insert(warm + i));
      next += run.warmup;
      const base = next;
      const insRate = await run.rate(run.measure, (i) => insert(base + i));
      next += run.measure;
      const insPages = await sample(SAMPLED, (i) =>
        counted(dbPool, babelfish, statements.insertProcessedMarker, params(next + i)),
      );
      next += SAMPLED;
      const dupIds = Array.from({ length: run.measure }, () => Math.floor(run.random() * next));
      const dupRate = await run.rate(run.measure, (i) =>
        bindParameters(dbPool.request(), params(dupIds[i]!))
          .query(statements.isProcessed)
          .then((r) => {
            if (r.recordset.length !== 1)
              throw new Error(`bench: marker ${dupIds[i]} not found as processed`);
          }),
      );
      // Fresh ids: the timed checks just read dupIds' pages into the cache, which would bias the sample low.
      const sampleIds = Array.from({ length: SAMPLED }, () => Math.floor(run.random() * next));
      const dupPages = await sample(SAMPLED, (i) =>
        counted(dbPool, babelfish, statements.isProcessed, params(sampleIds[i]!)),
      );
      const total = bytes.reduce((s, [, b]) => s + b, 0);
      rows.push([
        markers.toLocaleString("en"),
        markers === 0 ? "-" : (total / markers).toFixed(0),
        bytes.map(([n, b]) => `${n} ${markers === 0 ? "-" : (b / markers).toFixed(0)}`).join(", "),
        leafFill === null ? "-" : `${leafFill.toFixed(1)} %`,
        (insPages.read / SAMPLED).toFixed(2),
        (insPages.hit / SAMPLED).toFixed(2),
        insRate.toFixed(0),
        (dupPages.read / SAMPLED).toFixed(2),
        (dupPages.hit / SAMPLED).toFixed(2),
        dupRate.toFixed(0),
        run.load(),
      ]);
      run.log(formatTable(TDS_HEADER, rows.slice(-1)).join("\n"));
    }
    run.log(
      `\nper size (bytes per marker: the clustered table and each index; pages per statement, sampled):`,
    );
    run.log(formatTable(TDS_HEADER, rows).join("\n"));
    run.log(
      babelfish
        ? "Babelfish stores the table as PostgreSQL does (nvarchar as UTF-8): its bytes are not SQL Server's; hit/read are PostgreSQL shared buffers; no unique leaf fill (Babelfish has no sys.dm_db_index_physical_stats)"
        : "read = physical + read-ahead reads, hit = logical reads less both (SET STATISTICS IO); unique leaf fill = avg_page_space_used_in_percent of its leaves (sys.dm_db_index_physical_stats)",
    );
    await store.close();
  } finally {
    await dbPool.close();
    // On SQL Server another session still in it (a pooled connection closing) would fail the drop with 3702;
    // Babelfish refuses ALTER DATABASE ("not currently supported").
    const single = babelfish ? "" : `ALTER DATABASE ${database} SET SINGLE_USER WITH ROLLBACK IMMEDIATE; `;
    await pool.request().query(`${single}DROP DATABASE ${database};`);
    await pool.close();
  }
}

const TDS_HEADER = [
  "markers",
  "B/marker",
  "per relation",
  "unique leaf fill",
  "ins read",
  "ins hit",
  "ins/s",
  "dup read",
  "dup hit",
  "dup/s",
  "load",
];

async function sample(count: number, op: (i: number) => Promise<Pages>): Promise<Pages> {
  const sum = { read: 0, hit: 0 };
  for (let i = 0; i < count; i += 1) {
    const p = await op(i);
    sum.read += p.read;
    sum.hit += p.hit;
  }
  return sum;
}

/**
 * Inserts markers `from` .. `to`-1 through the worker's own batch insert (1,000 rows a statement), from the client:
 * no bulk path is common to SQL Server and Babelfish, and this one builds the indexes as the worker grows them.
 */
async function fill(pool: mssql.ConnectionPool, run: TdsRun, from: number, to: number): Promise<number> {
  const started = Date.now();
  const insert = batchStatements.insertMarkers(FILL_ROWS);
  const batches = Math.floor((to - from) / FILL_ROWS);
  let done = 0;
  await run.rate(batches, async (b) => {
    const first = from + b * FILL_ROWS;
    const ids = Array.from({ length: FILL_ROWS }, (_, i) => messageKey(run.messageId(first + i)));
    await bindParameters(pool.request(), [run.consumer, ...ids]).query(insert);
    done += 1;
    if (done % 250 === 0)
      run.log(
        `  filled ${(from + done * FILL_ROWS).toLocaleString("en")} (${((Date.now() - started) / 1000).toFixed(0)} s, load ${run.load()})`,
      );
  });
  return from + batches * FILL_ROWS;
}

/** Rows one bulk fill statement inserts: 10^6, six cross-joined digit tables. */
const BULK_ROWS = 1_000_000;

/**
 * Inserts markers `from` .. `to`-1 set-based: one INSERT ... SELECT a million rows, the numbers from six
 * cross-joined digit tables (Babelfish has no GENERATE_SERIES), each key HASHBYTES('MD5', 'OrderPlaced:<n>'), the
 * 16 bytes of the id `hashMessageId` formats. The unique index stays in place, so it grows by random inserts as
 * the worker grows it (leaves about 69 % full), not packed by a build.
 */
async function bulkFill(
  connectionString: string,
  database: string,
  run: TdsRun,
  from: number,
  to: number,
): Promise<number> {
  if (to <= from) return from;
  const started = Date.now();
  // A million rows a statement take longer than mssql's 15 s default request timeout.
  const pool = await new mssql.ConnectionPool(
    `${connectionString};Database=${database};Request Timeout=1800000`,
  ).connect();
  const digits = ["a", "b", "c", "d", "e", "f"];
  const sql = `WITH d AS (SELECT n FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS v(n)),
g AS (SELECT CAST(@p1 AS bigint) + ${digits.map((t, i) => `${10 ** i} * ${t}.n`).join(" + ")} AS g
  FROM ${digits.map((t) => `d AS ${t}`).join(" CROSS JOIN ")})
INSERT INTO dbo.Inbox (ConsumerId, MessageKey)
SELECT (SELECT Id FROM dbo.InboxConsumer WHERE Name = @p3), HASHBYTES('MD5', CONCAT('OrderPlaced:', g))
FROM g WHERE g < @p2;`;
  try {
    for (let at = from; at < to; at += BULK_ROWS) {
      await bindParameters(pool.request(), [at, Math.min(to, at + BULK_ROWS), run.consumer]).query(sql);
      run.log(
        `  filled ${Math.min(to, at + BULK_ROWS).toLocaleString("en")} (${((Date.now() - started) / 1000).toFixed(0)} s, load ${run.load()})`,
      );
    }
  } finally {
    await pool.close();
  }
  return to;
}
