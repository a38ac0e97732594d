import type { InboxBatchStatements, InboxStatements } from "../core.ts";
import { checkSchemaName, DEFAULT_INBOX_SCHEMA } from "../schema-name.ts";

/**
 * Every T-SQL statement the SQL Server adapter sends, except the migration files themselves. `npm run check:tsql`
 * parses each string constant exported here with Microsoft's parser, so what is checked is what is sent.
 * Parameters are @p1..@pn, bound from the positional parameter array.
 */

/** Serializes concurrent migrate runs; the lock belongs to the transaction and ends with it. */
export const ACQUIRE_MIGRATION_LOCK = `DECLARE @result int;
EXEC @result = sp_getapplock @Resource = @p1, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 120000;
IF @result < 0 THROW 51000, N'sbinbox migrate: could not take the migration lock', 1;`;

/** Creates the configured schema when it is missing (CREATE SCHEMA must be alone in its batch, hence EXEC). */
export const CREATE_SCHEMA = `IF SCHEMA_ID(@p1) IS NULL
BEGIN
  DECLARE @create nvarchar(300) = N'CREATE SCHEMA ' + QUOTENAME(@p1);
  EXEC sp_executesql @create;
END;`;

/**
 * The statements for an inbox in `schema` (validated, then bracket-quoted). The migration files name the inbox's
 * objects `dbo.X`; `migrationInSchema` moves them into the configured schema.
 */
export function sqlServerSql(schema: string = DEFAULT_INBOX_SCHEMA.sqlserver) {
  const s = `[${checkSchemaName(schema)}]`;
  const CREATE_VERSION_TABLE = `IF OBJECT_ID(N'${s}.SbInboxSchemaVersion', N'U') IS NULL
CREATE TABLE ${s}.SbInboxSchemaVersion (
  Version int NOT NULL CONSTRAINT PK_SbInboxSchemaVersion PRIMARY KEY,
  Name nvarchar(200) NOT NULL,
  AppliedUtc datetime2(3) NOT NULL CONSTRAINT DF_SbInboxSchemaVersion_AppliedUtc DEFAULT SYSUTCDATETIME()
);`;
  const SELECT_APPLIED_VERSIONS = `SELECT Version AS version FROM ${s}.SbInboxSchemaVersion ORDER BY Version;`;
  const RECORD_VERSION = `INSERT INTO ${s}.SbInboxSchemaVersion (Version, Name) VALUES (@p1, @p2);`;
  /** A handler module's own migrations (its business tables), one version track per module name. */
  const CREATE_MODULE_VERSION_TABLE = `IF OBJECT_ID(N'${s}.SbInboxModuleVersion', N'U') IS NULL
CREATE TABLE ${s}.SbInboxModuleVersion (
  Module nvarchar(100) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Version int NOT NULL,
  Name nvarchar(200) NOT NULL,
  AppliedUtc datetime2(3) NOT NULL CONSTRAINT DF_SbInboxModuleVersion_AppliedUtc DEFAULT SYSUTCDATETIME(),
  CONSTRAINT PK_SbInboxModuleVersion PRIMARY KEY (Module, Version)
);`;
  const SELECT_MODULE_VERSIONS = `SELECT Version AS version FROM ${s}.SbInboxModuleVersion WHERE Module = @p1 ORDER BY Version;`;
  const RECORD_MODULE_VERSION = `INSERT INTO ${s}.SbInboxModuleVersion (Module, Version, Name) VALUES (@p1, @p2, @p3);`;
  /** Read-only: which version tables exist (visible to db_datareader), so the worker can tell "never migrated". */
  const SELECT_VERSION_TABLES = `SELECT
  CASE WHEN OBJECT_ID(N'${s}.SbInboxSchemaVersion', N'U') IS NULL THEN 0 ELSE 1 END AS inbox,
  CASE WHEN OBJECT_ID(N'${s}.SbInboxModuleVersion', N'U') IS NULL THEN 0 ELSE 1 END AS module;`;

  const statements: InboxStatements = {
    insertProcessedMarker: `INSERT INTO ${s}.Inbox (MessageId, Consumer, ProcessedUtc) VALUES (@p1, @p2, SYSUTCDATETIME());`,
    insertOpenClaim: `INSERT INTO ${s}.Inbox (MessageId, Consumer) OUTPUT INSERTED.Id AS id VALUES (@p1, @p2);`,
    isProcessed: `SELECT 1 AS found FROM ${s}.Inbox WHERE MessageId = @p1 AND Consumer = @p2 AND ProcessedUtc IS NOT NULL;`,
    readMarker: `SELECT Id AS id, CASE WHEN ProcessedUtc IS NULL THEN 0 ELSE 1 END AS processed
FROM ${s}.Inbox WHERE MessageId = @p1 AND Consumer = @p2;`,
    markProcessed: `UPDATE ${s}.Inbox SET ProcessedUtc = SYSUTCDATETIME()
WHERE MessageId = @p1 AND Consumer = @p2 AND ProcessedUtc IS NULL;`,
    markProcessedById: `UPDATE ${s}.Inbox SET ProcessedUtc = SYSUTCDATETIME()
WHERE MessageId = @p1 AND Consumer = @p2 AND Id = @p3 AND ProcessedUtc IS NULL;`,
    // One transaction (the pool sets XACT_ABORT): a concurrent takeover of the same id waits on the row's lock,
    // then deletes nothing and finds the new row, so it inserts nothing and gets no row back. (A claim swept just
    // before is claimed afresh here, where PostgreSQL reports busy; either is safe.)
    reenterClaim: `BEGIN TRANSACTION;
DELETE FROM ${s}.Inbox WHERE MessageId = @p1 AND Consumer = @p2 AND Id = @p3 AND ProcessedUtc IS NULL;
INSERT INTO ${s}.Inbox (MessageId, Consumer) OUTPUT INSERTED.Id AS id
SELECT @p1, @p2 WHERE NOT EXISTS (
  SELECT 1 FROM ${s}.Inbox WITH (UPDLOCK, HOLDLOCK) WHERE MessageId = @p1 AND Consumer = @p2
);
COMMIT TRANSACTION;`,
    releaseClaim: `DELETE FROM ${s}.Inbox WHERE MessageId = @p1 AND Consumer = @p2 AND Id = @p3 AND ProcessedUtc IS NULL;`,
    // The predicate is evaluated on each row under its update lock, so a claim closed meanwhile stays.
    sweepStaleClaims: `DELETE FROM ${s}.Inbox
WHERE ProcessedUtc IS NULL
  AND ReceivedUtc < DATEADD(millisecond, -@p2, DATEADD(second, -@p1, SYSUTCDATETIME()));`,
    countOpenClaims: `SELECT COUNT(*) AS n FROM ${s}.Inbox WHERE ProcessedUtc IS NULL;`,
    cleanupCutoff: "SELECT DATEADD(millisecond, -@p2, DATEADD(second, -@p1, SYSUTCDATETIME())) AS cutoff;",
    // Small batches stay under lock escalation (5,000 locks); ROWLOCK keeps them row locks and READPAST skips rows
    // a concurrent insert or claim holds instead of waiting on them, so cleanup neither blocks nor deadlocks writers.
    // READCOMMITTEDLOCK: READPAST is refused (error 650) at READ COMMITTED under READ_COMMITTED_SNAPSHOT ON, Azure
    // SQL's default, unless the statement reads with locks.
    cleanupBatch: `DELETE TOP (@p2) FROM ${s}.Inbox WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK) WHERE ReceivedUtc < @p1;`,
    ping: "SELECT 1 AS ok;",
  };

  const ids = (rows: number): string => {
    if (!Number.isInteger(rows) || rows < 1 || rows > SQLSERVER_BATCH_MAX_ROWS)
      throw new RangeError(`a batch statement takes 1 to ${SQLSERVER_BATCH_MAX_ROWS} rows, not ${rows}`);
    return Array.from({ length: rows }, (_, i) => `@p${i + 2}`).join(", ");
  };
  // [consumer, id1..idn]: n + 1 parameters, far under the 2,100 limit at the 1,000 rows a VALUES list allows.
  // No MERGE or IGNORE_DUP_KEY: a key that exists fails the whole insert (2601/2627), and the batch's messages
  // are then processed one by one, where each marker insert decides its own message.
  const batchStatements: InboxBatchStatements = {
    maxRows: SQLSERVER_BATCH_MAX_ROWS,
    arrays: false,
    returnsInserted: false,
    isProcessed: (rows) => `SELECT MessageId AS id FROM ${s}.Inbox
WHERE Consumer = @p1 AND ProcessedUtc IS NOT NULL AND MessageId IN (${ids(rows)});`,
    insertMarkers: (rows) =>
      `INSERT INTO ${s}.Inbox (MessageId, Consumer, ProcessedUtc) VALUES ${ids(rows)
        .split(", ")
        .map((id) => `(${id}, @p1, SYSUTCDATETIME())`)
        .join(", ")};`,
  };

  return {
    batchStatements,
    CREATE_VERSION_TABLE,
    SELECT_APPLIED_VERSIONS,
    RECORD_VERSION,
    CREATE_MODULE_VERSION_TABLE,
    SELECT_MODULE_VERSIONS,
    RECORD_MODULE_VERSION,
    SELECT_VERSION_TABLES,
    statements,
    migrationInSchema: (sql: string): string => sql.replace(/\bdbo\./g, `${s}.`),
  };
}

/** A table value constructor takes at most 1,000 rows (error 10738); 1,001 parameters stay under 2,100. */
export const SQLSERVER_BATCH_MAX_ROWS = 1000;

/** The default schema's statements, which `npm run check:tsql` parses (it also parses another schema's). */
export const {
  CREATE_VERSION_TABLE,
  SELECT_APPLIED_VERSIONS,
  RECORD_VERSION,
  CREATE_MODULE_VERSION_TABLE,
  SELECT_MODULE_VERSIONS,
  RECORD_MODULE_VERSION,
  SELECT_VERSION_TABLES,
  statements,
  batchStatements,
} = sqlServerSql();

/** The batch statements at one, two and the most rows, so that `npm run check:tsql` parses what is sent. */
export const BATCH_STATEMENT_SAMPLES = [1, 2, SQLSERVER_BATCH_MAX_ROWS].map((rows) => ({
  isProcessed: batchStatements.isProcessed(rows),
  insertMarkers: batchStatements.insertMarkers(rows),
}));
