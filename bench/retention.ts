// `npm run bench:retention`: does inbox retention keep up with a 1,000 messages a second worker, and what does it
// do to that worker's latency? (issue 41, item 5). A worker's inbox path (one transaction a message, or batches of
// SBINBOX_BENCH_BATCH: the marker and a business row) is paced at SBINBOX_BENCH_RATE messages a second, first
// without cleanup, then with the store's cleanup running pass after pass over a backlog of markers past the
// retention (one phase per spacing in SBINBOX_BENCH_CLEANUP_MODES: the pace, or a fixed pause), without again
// between them. Prints messages/s, p50/p99 per message, deletes/s, the insert rate the pace measured, and the
// ratios the targets are stated in (deletes/s >= 3 x the insert rate; p99 with cleanup <= 1.2 x without; p50 too),
// with load average.
// PostgreSQL: an embedded server. SQL Server: SBINBOX_BENCH_MSSQL=<connection string> (a database is created).
// A benchmark, not a test.
import { availableParallelism, loadavg } from "node:os";
import mssql from "mssql";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { createPostgresInboxStore } from "../src/inbox/postgres/adapter.ts";
import { createSqlServerInboxStore } from "../src/inbox/sqlserver/adapter.ts";
import type { InboxCore } from "../src/inbox/core.ts";
import type { SqlExecutor } from "../src/domain/sql.ts";
import { formatTable } from "./common.ts";
import { DEFAULT_CLEANUP_PACE } from "../src/inbox/cleanup-pace.ts";
import type { CleanupOptions } from "../src/inbox/store.ts";

interface CleanupMode {
  readonly label: string;
  readonly rows: number;
  readonly spacing: Pick<CleanupOptions, "pace" | "pauseMs">;
}

function mode(text: string): CleanupMode {
  const match = /^(pace|pause(\d+))\/(\d+)$/.exec(text.trim());
  if (!match)
    throw new Error(`SBINBOX_BENCH_CLEANUP_MODES: "${text}" is not pace/<rows> or pause<ms>/<rows>`);
  const rows = Number(match[3]);
  if (match[1] === "pace")
    return {
      label: `pace ${MULTIPLE} x, batches of ${rows}`,
      rows,
      spacing: { pace: { ...DEFAULT_CLEANUP_PACE, multiple: MULTIPLE } },
    };
  return { label: `pause ${match[2]} ms, batches of ${rows}`, rows, spacing: { pauseMs: Number(match[2]) } };
}

const RATE = Number(process.env.SBINBOX_BENCH_RATE ?? 1000);
const BATCH = Number(process.env.SBINBOX_BENCH_BATCH ?? 1);
const PHASE_MS = Number(process.env.SBINBOX_BENCH_PHASE_MS ?? 12_000);
const BACKLOG = Number(process.env.SBINBOX_BENCH_BACKLOG ?? 1_500_000);
/**
 * The cleanup's spacings to measure, one "with cleanup" phase each: `pace/<rows>` (the pace by the insert rate,
 * SBINBOX_CLEANUP_RATE_MULTIPLE of SBINBOX_BENCH_MULTIPLE, batches of <rows>) or `pause<ms>/<rows>` (a fixed pause,
 * SBINBOX_CLEANUP_PAUSE_MS).
 */
const MULTIPLE = Number(process.env.SBINBOX_BENCH_MULTIPLE ?? DEFAULT_CLEANUP_PACE.multiple);
const CLEANUP_MODES = (process.env.SBINBOX_BENCH_CLEANUP_MODES ?? "pace/500,pace/2000").split(",").map(mode);
const RETENTION_MS = 360 * 3_600_000;
const CONSUMER = "bench";
/** How often the pacer starts the messages due (10 ms: 10 a tick at 1,000/s). */
const TICK_MS = 10;

interface Target {
  readonly name: string;
  readonly store: InboxCore;
  /** The business row each message writes beside its marker. */
  readonly effect: string;
  exec(sql: string, params?: unknown[]): Promise<void>;
  /** Inserts `count` markers received `ageHours` ago, in Id order before any the worker writes. */
  backlog(count: number, ageHours: number): Promise<void>;
  countMarkers(): Promise<number>;
  close(): Promise<void>;
}

async function postgresTarget(): Promise<Target> {
  const server = await EmbeddedPostgresServer.create();
  const url = await server.createDatabase("sbinbox_bench_retention");
  const store = createPostgresInboxStore({ url, maxConnections: 16 });
  await store.migrate();
  const pg = (await import("pg")).default;
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  const exec = async (sql: string, params?: unknown[]) => void (await admin.query(sql, params));
  await exec(
    `CREATE TABLE "Effects" ("Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "MessageId" text)`,
  );
  return {
    name: "PostgreSQL (embedded)",
    store,
    effect: `INSERT INTO "Effects" ("MessageId") VALUES ($1)`,
    exec,
    async backlog(count, ageHours) {
      await exec(`INSERT INTO "InboxConsumer" ("Name") VALUES ($1) ON CONFLICT DO NOTHING`, [CONSUMER]);
      for (let done = 0; done < count; done += 100_000) {
        await exec(
          `INSERT INTO "Inbox" ("ConsumerId", "MessageKey", "ReceivedSec")
SELECT (SELECT "Id" FROM "InboxConsumer" WHERE "Name" = $1), decode(md5(random()::text || g::text), 'hex'),
  floor(extract(epoch FROM now()) - 1577836800)::integer - $2::integer * 3600
FROM generate_series(1, $3::integer) AS g`,
          [CONSUMER, ageHours, Math.min(100_000, count - done)],
        );
      }
      await exec(`VACUUM ANALYZE "Inbox"`);
    },
    async countMarkers() {
      return Number((await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM "Inbox"`)).rows[0]!.n);
    },
    async close() {
      await store.close();
      await admin.end();
      await server.dispose();
    },
  };
}

async function sqlServerTarget(connectionString: string): Promise<Target> {
  const base = mssql.ConnectionPool.parseConnectionString(connectionString);
  const database = `sbinbox_bench_retention_${process.pid}`;
  const master = await new mssql.ConnectionPool(base).connect();
  await master.request().query(`CREATE DATABASE ${database}`);
  await master.close();
  const config: mssql.config = { ...base, database, pool: { max: 16 } };
  const store = createSqlServerInboxStore({ config });
  await store.migrate();
  const admin = await new mssql.ConnectionPool({ ...config, pool: { max: 2 } }).connect();
  const exec = async (sql: string, params: unknown[] = []) => {
    const request = admin.request();
    params.forEach((p, i) => request.input(`p${i + 1}`, p));
    await request.query(sql);
  };
  await exec(`CREATE TABLE dbo.Effects (Id bigint IDENTITY(1, 1) PRIMARY KEY, MessageId nvarchar(128))`);
  return {
    name: "SQL Server (TDS server at SBINBOX_BENCH_MSSQL)",
    store,
    effect: `INSERT INTO dbo.Effects (MessageId) VALUES (@p1);`,
    exec,
    async backlog(count, ageHours) {
      await exec(
        `INSERT INTO dbo.InboxConsumer (Name) SELECT @p1 WHERE NOT EXISTS (SELECT 1 FROM dbo.InboxConsumer WHERE Name = @p1)`,
        [CONSUMER],
      );
      for (let done = 0; done < count; done += 20_000) {
        await exec(
          `INSERT INTO dbo.Inbox (ConsumerId, MessageKey, ReceivedSec)
SELECT TOP (@p3) (SELECT Id FROM dbo.InboxConsumer WHERE Name = @p1), CAST(NEWID() AS binary(16)),
  DATEDIFF(second, '20200101', SYSUTCDATETIME()) - @p2 * 3600
FROM sys.all_columns AS a CROSS JOIN sys.all_columns AS b`,
          [CONSUMER, ageHours, Math.min(20_000, count - done)],
        );
      }
    },
    async countMarkers() {
      const result = await admin.request().query<{ n: number }>(`SELECT COUNT(*) AS n FROM dbo.Inbox`);
      return Number(result.recordset[0]!.n);
    },
    async close() {
      await store.close();
      await admin.close();
      const drop = await new mssql.ConnectionPool(base).connect();
      await drop.request().query(`DROP DATABASE ${database}`);
      await drop.close();
    },
  };
}

interface PhaseResult {
  readonly name: string;
  readonly messages: number;
  readonly seconds: number;
  readonly latenciesMs: number[];
  /** Latencies of the messages started while cleanup still had old markers to delete. */
  readonly busyLatenciesMs: number[];
  /** Seconds cleanup spent deleting (until a pass found nothing left). */
  readonly busySeconds: number;
  readonly deleted: number;
  readonly passes: number;
  readonly load: [number, number];
  readonly failed: number;
  /** The pace's last reading of the insert rate, when paced. */
  readonly measuredInsertRate?: number;
}

/** The worker: RATE messages a second, started on schedule whatever the earlier ones are doing. */
async function phase(
  target: Target,
  name: string,
  withCleanup: boolean,
  ids: { next: number },
  cleanupMode?: CleanupMode,
): Promise<PhaseResult> {
  const latencies: number[] = [];
  const busyLatencies: number[] = [];
  let busyUntil = withCleanup ? Infinity : 0;
  let measuredInsertRate: number | undefined;
  const inFlight = new Set<Promise<void>>();
  let failed = 0;
  const loadBefore = loadavg()[0]!;
  const began = performance.now();
  let started = 0;
  let cleaning = withCleanup;
  let deleted = 0;
  let passes = 0;
  // The pass under way ends with the phase: only what was deleted meanwhile counts.
  const phaseOver = new AbortController();
  const cleanup = (async () => {
    while (cleaning) {
      const n = await target.store.cleanup(RETENTION_MS, cleanupMode!.rows, {
        ...cleanupMode!.spacing,
        signal: phaseOver.signal,
        onBatch: (batch, info) => {
          deleted += batch;
          measuredInsertRate = info?.pace?.insertPerSecond ?? measuredInsertRate;
        },
      });
      passes += 1;
      if (n === 0) {
        busyUntil = Math.min(busyUntil, performance.now());
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  })();
  const one = (messageIds: string[]) => {
    const at = performance.now();
    const work = (id: string) => (tx: SqlExecutor) => tx.query(target.effect, [id]).then(() => undefined);
    const done =
      messageIds.length === 1
        ? target.store.process({ messageId: messageIds[0]!, consumer: CONSUMER }, work(messageIds[0]!), {
            firstDelivery: true,
          })
        : target.store
            .processBatch(
              CONSUMER,
              messageIds.map((id) => ({ messageId: id, work: work(id), firstDelivery: true })),
            )
            .then((r) => ({ kind: r.failure === undefined ? "committed" : "failed" }));
    const p = done.then((outcome) => {
      const ms = performance.now() - at;
      for (let i = 0; i < messageIds.length; i += 1) {
        latencies.push(ms);
        if (at < busyUntil) busyLatencies.push(ms);
      }
      if (outcome.kind !== "committed") failed += messageIds.length;
      inFlight.delete(p);
    });
    inFlight.add(p);
  };
  while (performance.now() - began < PHASE_MS) {
    const due = Math.floor(((performance.now() - began) / 1000) * RATE);
    while (started + BATCH <= due) {
      one(Array.from({ length: BATCH }, () => `m-${(ids.next += 1)}-${process.pid}`));
      started += BATCH;
    }
    await new Promise((r) => setTimeout(r, TICK_MS));
  }
  await Promise.all(inFlight);
  const seconds = (performance.now() - began) / 1000;
  cleaning = false;
  phaseOver.abort();
  await cleanup;
  const busySeconds = withCleanup ? (Math.min(busyUntil, began + seconds * 1000) - began) / 1000 : 0;
  return {
    name,
    messages: started,
    seconds,
    latenciesMs: latencies,
    busyLatenciesMs: busyLatencies,
    busySeconds,
    deleted,
    passes,
    load: [loadBefore, loadavg()[0]!],
    failed,
    measuredInsertRate,
  };
}

function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

async function main(): Promise<void> {
  const mssqlUrl = process.env.SBINBOX_BENCH_MSSQL;
  const target = mssqlUrl ? await sqlServerTarget(mssqlUrl) : await postgresTarget();
  try {
    console.log(
      `bench:retention on ${target.name}: ${availableParallelism()} cores, load ${loadavg()[0]!.toFixed(2)}`,
    );
    console.log(
      `worker paced at ${RATE} msg/s (${BATCH === 1 ? "one transaction a message" : `batches of ${BATCH}`}), ` +
        `phases of ${PHASE_MS / 1000} s, a backlog of ${BACKLOG} markers 400 h old, cleanup: ` +
        CLEANUP_MODES.map((m) => m.label).join("; "),
    );
    const ids = { next: 0 };
    await target.backlog(BACKLOG, 400);
    // A warm-up: the consumer registered, the pools full, the plans made.
    await phase(target, "warm-up", false, ids);
    // Alternated: without, with (one pause), without, with (the next pause), ..., without.
    const results: PhaseResult[] = [await phase(target, "without cleanup", false, ids)];
    for (const cleanupMode of CLEANUP_MODES) {
      // SBINBOX_BENCH_CHECKPOINT=1 (PostgreSQL): a checkpoint before each phase with cleanup, so each pass meets
      // pages not yet written since one, as a pass ten minutes after the last does.
      if (process.env.SBINBOX_BENCH_CHECKPOINT === "1" && !mssqlUrl) await target.exec("CHECKPOINT");
      results.push(await phase(target, `with cleanup, ${cleanupMode.label}`, true, ids, cleanupMode));
      results.push(await phase(target, "without cleanup", false, ids));
    }
    const rows = results.map((r) => [
      r.name,
      (r.messages / r.seconds).toFixed(0),
      quantile(r.latenciesMs, 0.5).toFixed(1),
      quantile(r.latenciesMs, 0.99).toFixed(1),
      String(r.failed),
      r.busySeconds > 0 ? (r.deleted / r.busySeconds).toFixed(0) : "-",
      String(r.passes),
      `${r.load[0].toFixed(2)} -> ${r.load[1].toFixed(2)}`,
    ]);
    for (const line of formatTable(
      ["phase", "msg/s", "p50 ms", "p99 ms", "failed", "deletes/s", "passes", "load (1 min)"],
      rows,
    ))
      console.log(line);
    const without = results.filter((r) => r.busySeconds === 0).flatMap((r) => r.latenciesMs);
    let deletedTotal = 0;
    for (const during of results.filter((r) => r.busySeconds > 0)) {
      deletedTotal += during.deleted;
      const insertRate = during.messages / during.seconds;
      // While it had old markers to delete: a backlog gone before the phase ended leaves an idle tail.
      const deleteRate = during.deleted / during.busySeconds;
      const p99Ratio = quantile(during.busyLatenciesMs, 0.99) / quantile(without, 0.99);
      const p50Ratio = quantile(during.busyLatenciesMs, 0.5) / quantile(without, 0.5);
      const measured = during.measuredInsertRate;
      console.log(
        `${during.name}: deleted for ${during.busySeconds.toFixed(1)} s of ${during.seconds.toFixed(1)} s; ` +
          `deletes/s / insert rate ${(deleteRate / insertRate).toFixed(2)} (target >= 3; ` +
          `${deleteRate.toFixed(0)} against ${insertRate.toFixed(0)}` +
          (measured === undefined ? "" : `, the pace measured ${measured.toFixed(0)}`) +
          `); of the ${during.busyLatenciesMs.length} messages started meanwhile / without cleanup: ` +
          `p50 ${quantile(during.busyLatenciesMs, 0.5).toFixed(1)} / ${quantile(without, 0.5).toFixed(1)} = ` +
          `${p50Ratio.toFixed(2)}, p99 ${quantile(during.busyLatenciesMs, 0.99).toFixed(1)} / ` +
          `${quantile(without, 0.99).toFixed(1)} = ${p99Ratio.toFixed(2)} (target <= 1.2); ` +
          `load ${during.load[0].toFixed(2)} -> ${during.load[1].toFixed(2)}`,
      );
    }
    const left = await target.countMarkers();
    console.log(
      `markers left: ${left} (backlog ${BACKLOG}, the worker wrote ${ids.next}; ${deletedTotal} deleted)`,
    );
  } finally {
    await target.close();
  }
}

await main();
