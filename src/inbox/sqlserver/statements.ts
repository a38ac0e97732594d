import type { InboxBatchStatements, InboxStatements, LegacyStatements } from "../core.ts";
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

/**
 * A session-owned application lock by name (the cleanup's, one pass per inbox at a time), asked for without
 * waiting: returns { result }, 0 or 1 when granted, below 0 when another session holds it (-1 on SQL Server, -999
 * on Babelfish). Held until released or until the session ends.
 */
export const TRY_SESSION_LOCK = `DECLARE @result int;
EXEC @result = sp_getapplock @Resource = @p1, @LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = 0;
SELECT @result AS result;`;
export const RELEASE_SESSION_LOCK = `EXEC sp_releaseapplock @Resource = @p1, @LockOwner = N'Session';`;

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

  // The markers carry the consumer's 2-byte Id; every statement finds it by name. A scalar subquery: an
  // unregistered name gives null, which the insert refuses (515), never a statement that touches no row.
  const consumer = (name: string): string => `(SELECT Id FROM ${s}.InboxConsumer WHERE Name = ${name})`;
  const statements: InboxStatements = {
    // One statement, so the range lock HOLDLOCK takes on the missing name lasts until its insert: two workers
    // registering at once insert it once, and IDENTITY is drawn only for a name not there yet.
    registerConsumer: `INSERT INTO ${s}.InboxConsumer (Name) SELECT @p1
WHERE NOT EXISTS (SELECT 1 FROM ${s}.InboxConsumer WITH (UPDLOCK, HOLDLOCK) WHERE Name = @p1);`,
    insertProcessedMarker: `INSERT INTO ${s}.Inbox (ConsumerId, MessageKey) VALUES (${consumer("@p2")}, @p1);`,
    insertOpenClaim: `INSERT INTO ${s}.Inbox (ConsumerId, MessageKey, ClaimedUtc) OUTPUT INSERTED.Id AS id
VALUES (${consumer("@p2")}, @p1, SYSUTCDATETIME());`,
    isProcessed: `SELECT 1 AS found FROM ${s}.Inbox
WHERE MessageKey = @p1 AND ConsumerId = ${consumer("@p2")} AND ClaimedUtc IS NULL;`,
    readMarker: `SELECT Id AS id, CASE WHEN ClaimedUtc IS NULL THEN 1 ELSE 0 END AS processed
FROM ${s}.Inbox WHERE MessageKey = @p1 AND ConsumerId = ${consumer("@p2")};`,
    markProcessed: `UPDATE ${s}.Inbox SET ClaimedUtc = NULL
WHERE MessageKey = @p1 AND ConsumerId = ${consumer("@p2")} AND ClaimedUtc IS NOT NULL;`,
    markProcessedById: `UPDATE ${s}.Inbox SET ClaimedUtc = NULL
WHERE MessageKey = @p1 AND ConsumerId = ${consumer("@p2")} AND Id = @p3 AND ClaimedUtc IS NOT NULL;`,
    // One transaction (the pool sets XACT_ABORT): a concurrent takeover of the same id waits on the row's lock,
    // then deletes nothing and finds the new row, so it inserts nothing and gets no row back. (A claim swept just
    // before is claimed afresh here, where PostgreSQL reports busy; either is safe.)
    reenterClaim: `BEGIN TRANSACTION;
DELETE FROM ${s}.Inbox WHERE MessageKey = @p1 AND ConsumerId = ${consumer("@p2")} AND Id = @p3 AND ClaimedUtc IS NOT NULL;
INSERT INTO ${s}.Inbox (ConsumerId, MessageKey, ClaimedUtc) OUTPUT INSERTED.Id AS id
SELECT ${consumer("@p2")}, @p1, SYSUTCDATETIME() WHERE NOT EXISTS (
  SELECT 1 FROM ${s}.Inbox WITH (UPDLOCK, HOLDLOCK) WHERE MessageKey = @p1 AND ConsumerId = ${consumer("@p2")}
);
COMMIT TRANSACTION;`,
    releaseClaim: `DELETE FROM ${s}.Inbox
WHERE MessageKey = @p1 AND ConsumerId = ${consumer("@p2")} AND Id = @p3 AND ClaimedUtc IS NOT NULL;`,
    // The predicate is evaluated on each row under its update lock, so a claim closed meanwhile stays.
    sweepStaleClaims: `DELETE FROM ${s}.Inbox
WHERE ClaimedUtc IS NOT NULL
  AND ClaimedUtc < DATEADD(millisecond, -@p2, DATEADD(second, -@p1, SYSUTCDATETIME()));`,
    countOpenClaims: `SELECT COUNT(*) AS n FROM ${s}.Inbox WHERE ClaimedUtc IS NOT NULL;`,
    // cutoffSec: a marker of second s was received before s + 1, so s < cutoffSec is older than the retention.
    // DATEDIFF counts boundaries crossed, which for whole seconds from midnight is the floor.
    // A derived table, not a variable: statements name only @p1..@pn, and the clock is read once.
    cleanupCutoff: `SELECT c.cutoff, DATEDIFF(second, '20200101', c.cutoff) AS cutoffSec
FROM (SELECT CAST(DATEADD(millisecond, -@p2, DATEADD(second, -@p1, SYSUTCDATETIME())) AS datetime2(3)) AS cutoff) AS c;`,
    // One range of the clustered key after the last Id of the batch before: the rows in it older than the cutoff
    // go. "old" counts them (a range with none ends the run) and "firstYoung" is the first Id kept, where the next
    // run starts; "high", the table's last Id (a seek to the clustered key's end), paces the pass. Small ranges
    // stay under lock escalation (5,000 locks) and ROWLOCK keeps them row locks. No READPAST: a row skipped would
    // be passed for good, and an old row is locked only by a stale claim's sweep or takeover, a short wait.
    cleanupBatch: `DECLARE @last bigint, @old int, @firstYoung bigint, @deleted int;
SELECT @last = MAX(Id), @old = SUM(CASE WHEN ReceivedSec < @p3 THEN 1 ELSE 0 END),
  @firstYoung = MIN(CASE WHEN ReceivedSec >= @p3 THEN Id END)
FROM (SELECT TOP (@p2) Id, ReceivedSec FROM ${s}.Inbox WHERE Id > @p1 ORDER BY Id) AS r;
DELETE FROM ${s}.Inbox WITH (ROWLOCK) WHERE Id > @p1 AND Id <= @last AND ReceivedSec < @p3;
SET @deleted = @@ROWCOUNT;
SELECT @deleted AS deleted, @last AS last, ISNULL(@old, 0) AS old, @firstYoung AS firstYoung,
  (SELECT MAX(Id) FROM ${s}.Inbox) AS high;`,
    ping: "SELECT 1 AS ok;",
  };

  const ids = (rows: number): string => {
    if (!Number.isInteger(rows) || rows < 1 || rows > SQLSERVER_BATCH_MAX_ROWS)
      throw new RangeError(`a batch statement takes 1 to ${SQLSERVER_BATCH_MAX_ROWS} rows, not ${rows}`);
    return Array.from({ length: rows }, (_, i) => `@p${i + 2}`).join(", ");
  };
  // [consumer, key1..keyn]: n + 1 parameters, far under the 2,100 limit at the 1,000 rows a VALUES list allows.
  // No MERGE or IGNORE_DUP_KEY: a key that exists fails the whole insert (2601/2627), and the batch's messages
  // are then processed one by one, where each marker insert decides its own message.
  const batchStatements: InboxBatchStatements = {
    maxRows: SQLSERVER_BATCH_MAX_ROWS,
    arrays: false,
    returnsInserted: false,
    isProcessed: (rows) => `SELECT MessageKey AS mkey FROM ${s}.Inbox
WHERE ConsumerId = ${consumer("@p1")} AND ClaimedUtc IS NULL AND MessageKey IN (${ids(rows)});`,
    insertMarkers: (rows) => `INSERT INTO ${s}.Inbox (ConsumerId, MessageKey)
SELECT ${consumer("@p1")}, k FROM (VALUES ${ids(rows)
      .split(", ")
      .map((id) => `(${id})`)
      .join(", ")}) AS v (k);`,
  };

  // The table of the inbox before 0002, read while it still holds markers (docs/inbox.md, "Moving to 0002").
  const legacy: LegacyStatements = {
    exists: `SELECT CASE WHEN OBJECT_ID(N'${s}.InboxLegacy', N'U') IS NULL THEN 0 ELSE 1 END AS found;`,
    hasRows: `SELECT CASE WHEN EXISTS (SELECT 1 FROM ${s}.InboxLegacy) THEN 1 ELSE 0 END AS found;`,
    // [consumer, id1..idn]: { id, done } of each with a marker there (done: processed; else an open claim).
    processed: (rows) => `SELECT MessageId AS id, CASE WHEN ProcessedUtc IS NULL THEN 0 ELSE 1 END AS done
FROM ${s}.InboxLegacy WHERE Consumer = @p1 AND MessageId IN (${ids(rows)});`,
    // An open claim's time there is its ReceivedUtc (0001's sweeper read the same).
    sweepStaleClaims: `DELETE FROM ${s}.InboxLegacy
WHERE ProcessedUtc IS NULL
  AND ReceivedUtc < DATEADD(millisecond, -@p2, DATEADD(second, -@p1, SYSUTCDATETIME()));`,
    // [cutoff, batchSize]: its old retention statement, on its own ReceivedUtc index.
    cleanupBatch: `DELETE TOP (@p2) FROM ${s}.InboxLegacy WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK) WHERE ReceivedUtc < @p1;`,
  };

  return {
    batchStatements,
    legacy,
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
  legacy,
} = sqlServerSql();

/** The batch statements at one, two and the most rows, so that `npm run check:tsql` parses what is sent. */
export const BATCH_STATEMENT_SAMPLES = [1, 2, SQLSERVER_BATCH_MAX_ROWS].map((rows) => ({
  isProcessed: batchStatements.isProcessed(rows),
  insertMarkers: batchStatements.insertMarkers(rows),
  legacyProcessed: legacy.processed(rows),
}));
