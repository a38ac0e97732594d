import { randomBytes } from "node:crypto";
import mssql from "mssql";
import type { Dialect, SqlResult } from "../../src/domain/sql.ts";
import type { InboxDriver, InboxStoreOptions } from "../../src/inbox/core.ts";
import { createPostgresInboxStore, PostgresDriver } from "../../src/inbox/postgres/adapter.ts";
import { createSqlServerInboxStore, SqlServerDriver } from "../../src/inbox/sqlserver/adapter.ts";
import { CREATE_SCHEMA } from "../../src/inbox/sqlserver/statements.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { messageKey } from "../../src/inbox/message-key.ts";
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
  /** [messageKey] -> { n } (keys: src/inbox/message-key.ts) */
  readonly countMarkers: string;
  /** -> { n } */
  readonly countAllMarkers: string;
  /** [messageKey, consumer, ageSeconds]: a processed marker received that long ago (consumer registered). */
  readonly insertAgedMarker: string;
  /** [messageKey, seconds]: moves the marker's ReceivedSec and ClaimedUtc that far into the past. */
  readonly ageMarker: string;
  /** -> { id }: the current transaction's id. */
  readonly transactionId: string;
  /**
   * -> { n }: sessions waiting on a lock while they hold a lock on this run's Inbox table, i.e. this run's own
   * consumers blocked inside the inbox. Another run's (or application's) lock wait in a shared database is not
   * counted: it would satisfy the wait without this run's consumer having reached the key.
   */
  readonly blockedSessions: string;
  /** -> { n }: every session of this database waiting on a lock (what blockedSessions once counted). */
  readonly anyBlockedSessions: string;
  /**
   * [messageId, consumer] -> { n }: a third session asks for the inbox key without waiting; 1 when another
   * transaction holds it (the fallback observation for a login that may not see other sessions).
   */
  readonly probeKeyLocked: string;
  /** -> { n }: 1 when this login may see other sessions' lock waits (blockedSessions means something). */
  readonly canSeeBlocking: string;
  /** -> { n } */
  readonly countVersions: string;
  /** [messageId, consumer]: a processed marker in the table before migration 0002, as its workers wrote it. */
  readonly insertLegacyMarker: string;
  /** [messageId, consumer]: an open two-phase claim in the inbox table of migration 0001 (ProcessedUtc null). */
  readonly insertLegacyClaim: string;
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

/**
 * Whether another transaction holds the inbox key, asked by a third session that does not wait: the observation
 * left when the login may not see other sessions' lock waits.
 */
export async function keyLocked(
  db: Pick<BackendDatabase, "raw" | "sql" | "target">,
  messageId: string,
  consumer: string,
): Promise<boolean> {
  // The probe's insert names the consumer by its Id: a consumer never registered could hold no key anyway.
  await db.raw.query(db.raw.statements.registerConsumer, [consumer]);
  if (db.target.kind === "sqlserver") {
    const n = await scalar(db.raw, db.sql.probeKeyLocked, [messageKey(messageId), consumer]);
    if (n < 0) throw new Error(`the key probe failed with SQL Server error ${-n}`);
    return n === 1;
  }
  const tx = await db.raw.begin();
  try {
    await tx.query("SET LOCAL lock_timeout = 1");
    await tx.query(db.sql.probeKeyLocked, [messageKey(messageId), consumer]);
    return false;
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === "55P03") return true; // lock_not_available: a transaction holds the key
    if (code === "23505") return false; // unique_violation: the key is committed, nobody holds it
    throw error;
  } finally {
    await tx.rollback();
  }
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
    countMarkers: `SELECT count(*)::int AS n FROM ${q}."Inbox" WHERE "MessageKey" = $1`,
    countAllMarkers: `SELECT count(*)::int AS n FROM ${q}."Inbox"`,
    insertAgedMarker: `INSERT INTO ${q}."Inbox" ("ConsumerId", "MessageKey", "ReceivedSec")
    VALUES ((SELECT "Id" FROM ${q}."InboxConsumer" WHERE "Name" = $2), $1,
      floor(extract(epoch FROM now()) - 1577836800)::integer - $3::integer)`,
    ageMarker: `UPDATE ${q}."Inbox" SET "ReceivedSec" = "ReceivedSec" - $2::integer,
      "ClaimedUtc" = "ClaimedUtc" - make_interval(secs => $2::int) WHERE "MessageKey" = $1`,
    transactionId: `SELECT txid_current()::text AS id`,
    // pg_locks spans the cluster: the database filter keeps another database's relation of the same oid out.
    blockedSessions: `SELECT count(*)::int AS n FROM pg_stat_activity AS a
    WHERE a.datname = current_database() AND a.wait_event_type = 'Lock' AND EXISTS (
      SELECT 1 FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation
      JOIN pg_namespace AS ns ON ns.oid = c.relnamespace
      WHERE l.pid = a.pid AND l.granted AND c.relname = 'Inbox' AND ns.nspname = '${schema}'
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`,
    anyBlockedSessions: `SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    // lock_timeout 0 means "wait forever" in PostgreSQL, so 1 ms stands for "do not wait". An uncommitted insert is
    // invisible to a read, so the probe inserts the key itself (rolled back): 55P03 when a transaction holds it.
    probeKeyLocked: `INSERT INTO ${q}."Inbox" ("ConsumerId", "MessageKey")
    VALUES ((SELECT "Id" FROM ${q}."InboxConsumer" WHERE "Name" = $2), $1)`,
    canSeeBlocking: "SELECT 1 AS n",
    countVersions: `SELECT count(*)::int AS n FROM ${q}."SbInboxSchemaVersion"`,
    insertLegacyMarker: `INSERT INTO ${q}."Inbox" ("MessageId", "Consumer", "ProcessedUtc") VALUES ($1, $2, now())`,
    insertLegacyClaim: `INSERT INTO ${q}."Inbox" ("MessageId", "Consumer") VALUES ($1, $2)`,
    countUniqueIndex: `SELECT count(*)::int AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = 'IX_Inbox_MessageKey_ConsumerId' AND n.nspname = '${schema}' AND i.indisunique`,
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
    countMarkers: `SELECT COUNT(*) AS n FROM ${q}.Inbox WHERE MessageKey = @p1`,
    countAllMarkers: `SELECT COUNT(*) AS n FROM ${q}.Inbox`,
    insertAgedMarker: `INSERT INTO ${q}.Inbox (ConsumerId, MessageKey, ReceivedSec)
    VALUES ((SELECT Id FROM ${q}.InboxConsumer WHERE Name = @p2), @p1, DATEDIFF(second, '20200101', SYSUTCDATETIME()) - @p3)`,
    ageMarker: `UPDATE ${q}.Inbox SET ReceivedSec = ReceivedSec - @p2, ClaimedUtc = DATEADD(second, -@p2, ClaimedUtc)
    WHERE MessageKey = @p1`,
    transactionId: `SELECT CAST(CURRENT_TRANSACTION_ID() AS nvarchar(40)) AS id`,
    // Other sessions' requests and locks are visible with VIEW SERVER STATE; without it only the caller's own
    // session is, so blocking cannot be seen. The waiter is one of this run's consumers when it holds a lock on this
    // run's Inbox table (an INSERT takes IX on the table before it waits on the key).
    blockedSessions: `SELECT COUNT(*) AS n FROM sys.dm_exec_requests AS r
    WHERE r.blocking_session_id <> 0 AND r.database_id = DB_ID() AND EXISTS (
      SELECT 1 FROM sys.dm_tran_locks AS l
      WHERE l.request_session_id = r.session_id AND l.request_status = 'GRANT' AND l.resource_type = 'OBJECT'
        AND l.resource_database_id = DB_ID() AND l.resource_associated_entity_id = OBJECT_ID(N'${q}.Inbox'))`,
    anyBlockedSessions: `SELECT COUNT(*) AS n FROM sys.dm_exec_requests WHERE blocking_session_id <> 0 AND database_id = DB_ID()`,
    // Microsoft's page for sys.dm_exec_requests: VIEW SERVER STATE cannot be granted in Azure SQL Database, so the
    // view is always limited to the current connection there; VIEW DATABASE STATE does not widen it. Azure SQL
    // Database therefore always takes the probe (probeKeyLocked).
    canSeeBlocking: `SELECT CASE
  WHEN CAST(SERVERPROPERTY('EngineEdition') AS int) = 5 THEN 0
  ELSE COALESCE(HAS_PERMS_BY_NAME(NULL, NULL, 'VIEW SERVER STATE'), 0)
END AS n`,
    // LOCK_TIMEOUT 0: give up at once (error 1222) rather than wait. READCOMMITTEDLOCK, because under
    // READ_COMMITTED_SNAPSHOT (Azure SQL Database's default) a plain read would return the committed version
    // without asking for the lock. The setting is put back: the connection returns to a pool.
    probeKeyLocked: `SET LOCK_TIMEOUT 0;
DECLARE @n int = 0;
BEGIN TRY
  SELECT @n = COUNT(*) FROM ${q}.Inbox WITH (READCOMMITTEDLOCK)
  WHERE MessageKey = @p1 AND ConsumerId = (SELECT Id FROM ${q}.InboxConsumer WHERE Name = @p2);
  SET @n = 0;
END TRY
BEGIN CATCH
  SET @n = CASE WHEN ERROR_NUMBER() = 1222 THEN 1 ELSE -ERROR_NUMBER() END;
END CATCH;
SET LOCK_TIMEOUT -1;
SELECT @n AS n;`,
    countVersions: `SELECT COUNT(*) AS n FROM ${q}.SbInboxSchemaVersion`,
    insertLegacyMarker: `INSERT INTO ${q}.Inbox (MessageId, Consumer, ProcessedUtc) VALUES (@p1, @p2, SYSUTCDATETIME())`,
    insertLegacyClaim: `INSERT INTO ${q}.Inbox (MessageId, Consumer) VALUES (@p1, @p2)`,
    // By its key columns, (MessageKey, ConsumerId) in that order, not by its name: the guarantee is a unique index on
    // them, and SQL Server's classifier goes by the marker insert's error number. (Some TDS servers also store
    // index names altered in sys.indexes.)
    countUniqueIndex: `SELECT COUNT(*) AS n FROM sys.indexes AS i
    WHERE i.object_id = OBJECT_ID(N'${q}.Inbox') AND i.is_unique = 1 AND i.is_primary_key = 0
      AND (SELECT COUNT(*) FROM sys.index_columns AS ic
           WHERE ic.object_id = i.object_id AND ic.index_id = i.index_id AND ic.key_ordinal > 0) = 2
      AND EXISTS (SELECT 1 FROM sys.index_columns AS ic
        JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
        WHERE ic.object_id = i.object_id AND ic.index_id = i.index_id AND ic.key_ordinal = 1 AND c.name = N'MessageKey')
      AND EXISTS (SELECT 1 FROM sys.index_columns AS ic
        JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
        WHERE ic.object_id = i.object_id AND ic.index_id = i.index_id AND ic.key_ordinal = 2 AND c.name = N'ConsumerId')`,
    dropSchema: DROP_SQLSERVER_SCHEMA,
  };
}

/**
 * Drops every table of schema @p1, then the schema: what a schema-scoped run leaves behind. STRING_AGG builds the
 * statement: Microsoft documents `SELECT @v = @v + ... FROM` over several rows as giving undefined results (some
 * servers keep only the last row, and the schema's drop then fails on the tables left).
 */
const DROP_SQLSERVER_SCHEMA = `DECLARE @drop nvarchar(max);
SELECT @drop = STRING_AGG(CAST(N'DROP TABLE ' + QUOTENAME(s.name) + N'.' + QUOTENAME(t.name) AS nvarchar(max)), N'; ')
FROM sys.tables AS t JOIN sys.schemas AS s ON s.schema_id = t.schema_id WHERE s.name = @p1;
IF SCHEMA_ID(@p1) IS NOT NULL SET @drop = COALESCE(@drop + N'; ', N'') + N'DROP SCHEMA ' + QUOTENAME(@p1) + N';';
IF @drop IS NOT NULL EXEC sp_executesql @drop;`;

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
      target: { kind: "postgres", url },
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
        target: { kind: "sqlserver", config },
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
