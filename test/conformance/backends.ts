import { randomBytes } from "node:crypto";
import mssql from "mssql";
import type { Dialect, SqlResult } from "../../src/domain/sql.ts";
import type { InboxDriver, InboxStoreOptions } from "../../src/inbox/core.ts";
import { createPostgresInboxStore, PostgresDriver } from "../../src/inbox/postgres/adapter.ts";
import { createSqlServerInboxStore, SqlServerDriver } from "../../src/inbox/sqlserver/adapter.ts";
import { CREATE_SCHEMA } from "../../src/inbox/sqlserver/statements.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { checkSchemaName } from "../../src/inbox/schema-name.ts";
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
  /** -> { n }: 1 when this login may see other sessions' lock waits (blockedSessions means something). */
  readonly canSeeBlocking: string;
  /** -> { n } */
  readonly countVersions: string;
  /** -> { n }: the inbox's unique index exists and is unique. */
  readonly countUniqueIndex: string;
  /** [schema]: drops the schema with its tables (a schema-scoped run's clean-up). */
  readonly dropSchema?: string;
}

export interface BackendDatabase {
  readonly sql: ConformanceSql;
  /** A store on this database; closed by dispose(). */
  createStore(options?: InboxStoreOptions): InboxStore;
  /** Direct access to the same database, outside the store: arrangement and inspection only. */
  readonly raw: InboxDriver;
  /** The schema of this run's tables, when the run is scoped to a schema rather than a database. */
  readonly schema?: string;
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

/** The conformance SQL with every table in `schema` (the inbox's schema too). */
function postgresSql(schema: string): ConformanceSql {
  const q = `"${checkSchemaName(schema)}"`;
  return {
    createEffects: `CREATE TABLE ${q}."Effects" ("Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    "MessageId" varchar(128) NOT NULL, "Consumer" varchar(200) NOT NULL)`,
    insertEffect: `INSERT INTO ${q}."Effects" ("MessageId", "Consumer") VALUES ($1, $2)`,
    countEffects: `SELECT count(*)::int AS n FROM ${q}."Effects" WHERE "MessageId" = $1`,
    createOrders: `CREATE TABLE ${q}."Orders" ("Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "OrderNo" int NOT NULL);
    CREATE UNIQUE INDEX "UX_Orders_OrderNo" ON ${q}."Orders" ("OrderNo")`,
    insertOrder: `INSERT INTO ${q}."Orders" ("OrderNo") VALUES ($1)`,
    createNaiveInbox: `CREATE TABLE ${q}."NaiveInbox" ("MessageId" varchar(128) NOT NULL, "Consumer" varchar(200) NOT NULL)`,
    naiveCheck: `SELECT 1 AS found FROM ${q}."NaiveInbox" WHERE "MessageId" = $1 AND "Consumer" = $2`,
    naiveInsert: `INSERT INTO ${q}."NaiveInbox" ("MessageId", "Consumer") VALUES ($1, $2)`,
    countMarkers: `SELECT count(*)::int AS n FROM ${q}."Inbox" WHERE "MessageId" = $1`,
    countAllMarkers: `SELECT count(*)::int AS n FROM ${q}."Inbox"`,
    insertAgedMarker: `INSERT INTO ${q}."Inbox" ("MessageId", "Consumer", "ReceivedUtc", "ProcessedUtc")
    VALUES ($1, $2, now() - make_interval(secs => $3::int), now() - make_interval(secs => $3::int))`,
    ageMarker: `UPDATE ${q}."Inbox" SET "ReceivedUtc" = "ReceivedUtc" - make_interval(secs => $2::int) WHERE "MessageId" = $1`,
    transactionId: `SELECT txid_current()::text AS id`,
    blockedSessions: `SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    canSeeBlocking: "SELECT 1 AS n",
    countVersions: `SELECT count(*)::int AS n FROM ${q}."SbInboxSchemaVersion"`,
    countUniqueIndex: `SELECT count(*)::int AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = 'IX_Inbox_MessageId_Consumer' AND n.nspname = '${schema}' AND i.indisunique`,
    dropSchema: `DROP SCHEMA IF EXISTS ${q} CASCADE`,
  };
}

/**
 * The conformance SQL with every table in `schema`. Exported for `npm run check:tsql`, which parses it: this T-SQL
 * runs only where a SQL Server is at hand.
 */
export function sqlServerSql(schema: string): ConformanceSql {
  const q = `[${checkSchemaName(schema)}]`;
  return {
    createEffects: `CREATE TABLE ${q}.Effects (Id bigint IDENTITY(1, 1) PRIMARY KEY,
    MessageId nvarchar(128) NOT NULL, Consumer nvarchar(200) NOT NULL)`,
    insertEffect: `INSERT INTO ${q}.Effects (MessageId, Consumer) VALUES (@p1, @p2)`,
    countEffects: `SELECT COUNT(*) AS n FROM ${q}.Effects WHERE MessageId = @p1`,
    createOrders: `CREATE TABLE ${q}.Orders (Id bigint IDENTITY(1, 1) PRIMARY KEY, OrderNo int NOT NULL);
    CREATE UNIQUE INDEX UX_Orders_OrderNo ON ${q}.Orders (OrderNo)`,
    insertOrder: `INSERT INTO ${q}.Orders (OrderNo) VALUES (@p1)`,
    createNaiveInbox: `CREATE TABLE ${q}.NaiveInbox (MessageId nvarchar(128) NOT NULL, Consumer nvarchar(200) NOT NULL)`,
    naiveCheck: `SELECT 1 AS found FROM ${q}.NaiveInbox WHERE MessageId = @p1 AND Consumer = @p2`,
    naiveInsert: `INSERT INTO ${q}.NaiveInbox (MessageId, Consumer) VALUES (@p1, @p2)`,
    countMarkers: `SELECT COUNT(*) AS n FROM ${q}.Inbox WHERE MessageId = @p1`,
    countAllMarkers: `SELECT COUNT(*) AS n FROM ${q}.Inbox`,
    insertAgedMarker: `INSERT INTO ${q}.Inbox (MessageId, Consumer, ReceivedUtc, ProcessedUtc)
    VALUES (@p1, @p2, DATEADD(second, -@p3, SYSUTCDATETIME()), DATEADD(second, -@p3, SYSUTCDATETIME()))`,
    ageMarker: `UPDATE ${q}.Inbox SET ReceivedUtc = DATEADD(second, -@p2, ReceivedUtc) WHERE MessageId = @p1`,
    transactionId: `SELECT CAST(CURRENT_TRANSACTION_ID() AS nvarchar(40)) AS id`,
    // Other sessions' requests are visible with VIEW SERVER STATE (SQL Server), or VIEW DATABASE STATE or db_owner
    // (Azure SQL Database); without them only the caller's own session is, so blocking cannot be seen.
    blockedSessions: `SELECT COUNT(*) AS n FROM sys.dm_exec_requests WHERE blocking_session_id <> 0 AND database_id = DB_ID()`,
    canSeeBlocking: `SELECT CASE
  WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) = 5 THEN
    CASE WHEN HAS_PERMS_BY_NAME(DB_NAME(), 'DATABASE', 'VIEW DATABASE STATE') = 1 OR IS_MEMBER('db_owner') = 1
      THEN 1 ELSE 0 END
  ELSE COALESCE(HAS_PERMS_BY_NAME(NULL, NULL, 'VIEW SERVER STATE'), 0)
END AS n`,
    countVersions: `SELECT COUNT(*) AS n FROM ${q}.SbInboxSchemaVersion`,
    countUniqueIndex: `SELECT COUNT(*) AS n FROM sys.indexes
    WHERE name = 'IX_Inbox_MessageId_Consumer' AND object_id = OBJECT_ID(N'${q}.Inbox') AND is_unique = 1`,
    dropSchema: DROP_SQLSERVER_SCHEMA,
  };
}

/** Drops every table of schema @p1, then the schema: what a schema-scoped run leaves behind. */
const DROP_SQLSERVER_SCHEMA = `DECLARE @drop nvarchar(max) = N'';
SELECT @drop = @drop + N'DROP TABLE ' + QUOTENAME(s.name) + N'.' + QUOTENAME(t.name) + N'; '
FROM sys.tables AS t JOIN sys.schemas AS s ON s.schema_id = t.schema_id WHERE s.name = @p1;
IF SCHEMA_ID(@p1) IS NOT NULL SET @drop = @drop + N'DROP SCHEMA ' + QUOTENAME(@p1) + N';';
EXEC sp_executesql @drop;`;

/** A schema name for one run: unique, a plain identifier, at most 63 characters. */
export function runSchemaName(label: string): string {
  const slug = label
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "_")
    .slice(0, 30);
  return `sbinbox_t_${slug}_${process.pid}_${randomBytes(3).toString("hex")}`;
}

export const postgresBackend: Backend = {
  name: "PostgreSQL (embedded)",
  dialect: "postgres",
  async database(label) {
    const url = await createTestDatabase(label);
    const stores: InboxStore[] = [];
    const raw = new PostgresDriver({ url, maxConnections: 5 });
    return {
      sql: postgresSql("public"),
      raw,
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

let sharedSchemaDatabase: Promise<string> | undefined;

/**
 * PostgreSQL the way a team runs the suite against a database it does not own: one existing database, each run
 * in a schema of its own (the inbox's schema setting), dropped afterwards.
 */
export const postgresSchemaBackend: Backend = {
  name: "PostgreSQL (embedded), a schema per run in one existing database",
  dialect: "postgres",
  async database(label) {
    sharedSchemaDatabase ??= createTestDatabase("shared_by_schema_runs");
    const url = await sharedSchemaDatabase;
    const schema = runSchemaName(label);
    const sql = postgresSql(schema);
    const stores: InboxStore[] = [];
    const raw = new PostgresDriver({ url, maxConnections: 5, schema });
    return {
      sql,
      raw,
      schema,
      createStore(options = {}) {
        const store = createPostgresInboxStore({ url, maxConnections: 20, schema, ...options });
        stores.push(store);
        return store;
      },
      async dispose() {
        await Promise.all(stores.map((s) => s.close()));
        await raw.query(sql.dropSchema!);
        await raw.close();
      },
    };
  },
};

/** The database a SQL Server connection string names, if any besides master. */
function namedDatabase(config: mssql.config): string | undefined {
  const name = config.database?.trim();
  return name && name.toLowerCase() !== "master" ? name : undefined;
}

/**
 * SQL Server from SBINBOX_TEST_MSSQL. When the connection string names a database (an Azure SQL development
 * database, say), the suite runs inside it, each run in a schema of its own that it drops afterwards: no
 * server-level power is needed, only CREATE SCHEMA and CREATE TABLE there. Without one (a container's sa, as the
 * GitHub workflow has), each test file gets a database of its own, dropped afterwards.
 */
export function sqlServerBackend(connectionString: string): Backend {
  const base = mssql.ConnectionPool.parseConnectionString(connectionString);
  const existing = namedDatabase(base);
  return existing === undefined ? sqlServerDatabasePerRun(base) : sqlServerSchemaPerRun(base, existing);
}

function sqlServerSchemaPerRun(base: mssql.config, database: string): Backend {
  return {
    name: `SQL Server (SBINBOX_TEST_MSSQL, a schema per run in database ${database})`,
    dialect: "sqlserver",
    async database(label) {
      const schema = runSchemaName(label);
      const sql = sqlServerSql(schema);
      const config: mssql.config = { ...base, pool: { max: 20 } };
      const stores: InboxStore[] = [];
      const raw = new SqlServerDriver({ config, schema });
      // The schema exists before migrate, so the business tables the suite creates can go into it first.
      await raw.query(CREATE_SCHEMA, [schema]);
      return {
        sql,
        raw,
        schema,
        createStore(options = {}) {
          const store = createSqlServerInboxStore({ config, schema, ...options });
          stores.push(store);
          return store;
        },
        async dispose() {
          await Promise.all(stores.map((s) => s.close()));
          await raw.query(sql.dropSchema!, [schema]);
          await raw.close();
        },
      };
    },
  };
}

function sqlServerDatabasePerRun(base: mssql.config): Backend {
  return {
    name: "SQL Server (SBINBOX_TEST_MSSQL)",
    dialect: "sqlserver",
    async database(label) {
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
        sql: sqlServerSql("dbo"),
        raw,
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
