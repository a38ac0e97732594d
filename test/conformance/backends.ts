import mssql from "mssql";
import type { Dialect, SqlResult } from "../../src/domain/sql.ts";
import type { InboxDriver, InboxStoreOptions } from "../../src/inbox/core.ts";
import { createPostgresInboxStore, PostgresDriver } from "../../src/inbox/postgres/adapter.ts";
import { createSqlServerInboxStore, SqlServerDriver } from "../../src/inbox/sqlserver/adapter.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

/** The business-side SQL the conformance tests need, per dialect. */
export interface ConformanceSql {
  readonly createEffects: string;
  /** [messageId, consumer] */
  readonly insertEffect: string;
  /** [messageId] -> { n } */
  readonly countEffects: string;
  /** A business table with its own unique index. */
  readonly createOrders: string;
  /** [orderNo] */
  readonly insertOrder: string;
  /** The check-then-insert "inbox" without a unique index. */
  readonly createNaiveInbox: string;
  /** [messageId, consumer] -> rows */
  readonly naiveCheck: string;
  /** [messageId, consumer] */
  readonly naiveInsert: string;
  /** [messageId] -> { n } */
  readonly countMarkers: string;
  /** -> { n } */
  readonly countAllMarkers: string;
  /** [messageId, consumer, ageSeconds]: a processed marker received that long ago. */
  readonly insertAgedMarker: string;
  /** [messageId, seconds]: moves the marker's ReceivedUtc that far into the past. */
  readonly ageMarker: string;
  /** -> { id }: the current transaction's id. */
  readonly transactionId: string;
  /** -> { n }: sessions of this database waiting on a lock. */
  readonly blockedSessions: string;
  /** -> { n } */
  readonly countVersions: string;
  /** -> { n }: the inbox's unique index exists and is unique. */
  readonly countUniqueIndex: string;
}

export interface BackendDatabase {
  readonly sql: ConformanceSql;
  /** A store on this database; closed by dispose(). */
  createStore(options?: InboxStoreOptions): InboxStore;
  /** Direct access to the same database, outside the store: arrangement and inspection only. */
  readonly raw: InboxDriver;
  /** Where the database is, for suites that open their own pools (the outbox's upstream transactions). */
  readonly target:
    | { readonly kind: "postgres"; readonly url: string }
    | { readonly kind: "sqlserver"; readonly config: mssql.config };
  dispose(): Promise<void>;
}

export interface Backend {
  readonly name: string;
  readonly dialect: Dialect;
  database(label: string): Promise<BackendDatabase>;
}

export async function scalar(
  raw: Pick<InboxDriver, "query">,
  sql: string,
  params?: unknown[],
): Promise<number> {
  const result: SqlResult<{ n: unknown }> = await raw.query<{ n: unknown }>(sql, params);
  return Number(result.rows[0]?.n);
}

const postgresSql: ConformanceSql = {
  createEffects: `CREATE TABLE "Effects" ("Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    "MessageId" varchar(128) NOT NULL, "Consumer" varchar(200) NOT NULL)`,
  insertEffect: `INSERT INTO "Effects" ("MessageId", "Consumer") VALUES ($1, $2)`,
  countEffects: `SELECT count(*)::int AS n FROM "Effects" WHERE "MessageId" = $1`,
  createOrders: `CREATE TABLE "Orders" ("Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "OrderNo" int NOT NULL);
    CREATE UNIQUE INDEX "UX_Orders_OrderNo" ON "Orders" ("OrderNo")`,
  insertOrder: `INSERT INTO "Orders" ("OrderNo") VALUES ($1)`,
  createNaiveInbox: `CREATE TABLE "NaiveInbox" ("MessageId" varchar(128) NOT NULL, "Consumer" varchar(200) NOT NULL)`,
  naiveCheck: `SELECT 1 AS found FROM "NaiveInbox" WHERE "MessageId" = $1 AND "Consumer" = $2`,
  naiveInsert: `INSERT INTO "NaiveInbox" ("MessageId", "Consumer") VALUES ($1, $2)`,
  countMarkers: `SELECT count(*)::int AS n FROM "Inbox" WHERE "MessageId" = $1`,
  countAllMarkers: `SELECT count(*)::int AS n FROM "Inbox"`,
  insertAgedMarker: `INSERT INTO "Inbox" ("MessageId", "Consumer", "ReceivedUtc", "ProcessedUtc")
    VALUES ($1, $2, now() - make_interval(secs => $3::int), now() - make_interval(secs => $3::int))`,
  ageMarker: `UPDATE "Inbox" SET "ReceivedUtc" = "ReceivedUtc" - make_interval(secs => $2::int) WHERE "MessageId" = $1`,
  transactionId: `SELECT txid_current()::text AS id`,
  blockedSessions: `SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'`,
  countVersions: `SELECT count(*)::int AS n FROM "SbInboxSchemaVersion"`,
  countUniqueIndex: `SELECT count(*)::int AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relname = 'IX_Inbox_MessageId_Consumer' AND i.indisunique`,
};

const sqlServerSql: ConformanceSql = {
  createEffects: `CREATE TABLE dbo.Effects (Id bigint IDENTITY(1, 1) PRIMARY KEY,
    MessageId nvarchar(128) NOT NULL, Consumer nvarchar(200) NOT NULL)`,
  insertEffect: `INSERT INTO dbo.Effects (MessageId, Consumer) VALUES (@p1, @p2)`,
  countEffects: `SELECT COUNT(*) AS n FROM dbo.Effects WHERE MessageId = @p1`,
  createOrders: `CREATE TABLE dbo.Orders (Id bigint IDENTITY(1, 1) PRIMARY KEY, OrderNo int NOT NULL);
    CREATE UNIQUE INDEX UX_Orders_OrderNo ON dbo.Orders (OrderNo)`,
  insertOrder: `INSERT INTO dbo.Orders (OrderNo) VALUES (@p1)`,
  createNaiveInbox: `CREATE TABLE dbo.NaiveInbox (MessageId nvarchar(128) NOT NULL, Consumer nvarchar(200) NOT NULL)`,
  naiveCheck: `SELECT 1 AS found FROM dbo.NaiveInbox WHERE MessageId = @p1 AND Consumer = @p2`,
  naiveInsert: `INSERT INTO dbo.NaiveInbox (MessageId, Consumer) VALUES (@p1, @p2)`,
  countMarkers: `SELECT COUNT(*) AS n FROM dbo.Inbox WHERE MessageId = @p1`,
  countAllMarkers: `SELECT COUNT(*) AS n FROM dbo.Inbox`,
  insertAgedMarker: `INSERT INTO dbo.Inbox (MessageId, Consumer, ReceivedUtc, ProcessedUtc)
    VALUES (@p1, @p2, DATEADD(second, -@p3, SYSUTCDATETIME()), DATEADD(second, -@p3, SYSUTCDATETIME()))`,
  ageMarker: `UPDATE dbo.Inbox SET ReceivedUtc = DATEADD(second, -@p2, ReceivedUtc) WHERE MessageId = @p1`,
  transactionId: `SELECT CAST(CURRENT_TRANSACTION_ID() AS nvarchar(40)) AS id`,
  blockedSessions: `SELECT COUNT(*) AS n FROM sys.dm_exec_requests WHERE blocking_session_id <> 0 AND database_id = DB_ID()`,
  countVersions: `SELECT COUNT(*) AS n FROM dbo.SbInboxSchemaVersion`,
  countUniqueIndex: `SELECT COUNT(*) AS n FROM sys.indexes
    WHERE name = 'IX_Inbox_MessageId_Consumer' AND object_id = OBJECT_ID(N'dbo.Inbox') AND is_unique = 1`,
};

export const postgresBackend: Backend = {
  name: "PostgreSQL (embedded)",
  dialect: "postgres",
  async database(label) {
    const url = await createTestDatabase(label);
    const stores: InboxStore[] = [];
    const raw = new PostgresDriver({ url, maxConnections: 5 });
    return {
      sql: postgresSql,
      raw,
      target: { kind: "postgres", url },
      createStore(options = {}) {
        const store = createPostgresInboxStore({ url, maxConnections: 20, ...options });
        stores.push(store);
        return store;
      },
      async dispose() {
        await Promise.all(stores.map((s) => s.close()));
        await raw.close();
      },
    };
  },
};

/** SQL Server from SBINBOX_TEST_MSSQL: each test file gets a database of its own, dropped afterwards. */
export function sqlServerBackend(connectionString: string): Backend {
  return {
    name: "SQL Server (SBINBOX_TEST_MSSQL)",
    dialect: "sqlserver",
    async database(label) {
      const base = mssql.ConnectionPool.parseConnectionString(connectionString);
      const name = `sbinbox_${label
        .toLowerCase()
        .replace(/[^a-z0-9]+/g, "_")
        .slice(0, 40)}_${process.pid}`;
      const admin = new mssql.ConnectionPool({ ...base, database: "master" });
      await admin.connect();
      await admin.request().batch(`IF DB_ID(N'${name}') IS NOT NULL
        BEGIN ALTER DATABASE [${name}] SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE [${name}]; END;
        CREATE DATABASE [${name}];`);
      const config: mssql.config = { ...base, database: name, pool: { max: 20 } };
      const stores: InboxStore[] = [];
      const raw = new SqlServerDriver({ config });
      return {
        sql: sqlServerSql,
        raw,
        target: { kind: "sqlserver", config },
        createStore(options = {}) {
          const store = createSqlServerInboxStore({ config, ...options });
          stores.push(store);
          return store;
        },
        async dispose() {
          await Promise.all(stores.map((s) => s.close()));
          await raw.close();
          await admin
            .request()
            .batch(
              `ALTER DATABASE [${name}] SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE [${name}];`,
            );
          await admin.close();
        },
      };
    },
  };
}
