import type { InboxStatements } from "../core.ts";

/**
 * Every T-SQL statement the SQL Server adapter sends, except the migration files themselves. `npm run check:tsql`
 * parses each string constant exported here with Microsoft's parser, so what is checked is what is sent.
 * Parameters are @p1..@pn, bound from the positional parameter array.
 */

/** Serializes concurrent migrate runs; the lock belongs to the transaction and ends with it. */
export const ACQUIRE_MIGRATION_LOCK = `DECLARE @result int;
EXEC @result = sp_getapplock @Resource = @p1, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 120000;
IF @result < 0 THROW 51000, N'sbinbox migrate: could not take the migration lock', 1;`;

export const CREATE_VERSION_TABLE = `IF OBJECT_ID(N'dbo.SbInboxSchemaVersion', N'U') IS NULL
CREATE TABLE dbo.SbInboxSchemaVersion (
  Version int NOT NULL CONSTRAINT PK_SbInboxSchemaVersion PRIMARY KEY,
  Name nvarchar(200) NOT NULL,
  AppliedUtc datetime2(3) NOT NULL CONSTRAINT DF_SbInboxSchemaVersion_AppliedUtc DEFAULT SYSUTCDATETIME()
);`;

export const SELECT_APPLIED_VERSIONS =
  "SELECT Version AS version FROM dbo.SbInboxSchemaVersion ORDER BY Version;";
export const RECORD_VERSION = "INSERT INTO dbo.SbInboxSchemaVersion (Version, Name) VALUES (@p1, @p2);";

/** A handler module's own migrations (its business tables), one version track per module name. */
export const CREATE_MODULE_VERSION_TABLE = `IF OBJECT_ID(N'dbo.SbInboxModuleVersion', N'U') IS NULL
CREATE TABLE dbo.SbInboxModuleVersion (
  Module nvarchar(100) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Version int NOT NULL,
  Name nvarchar(200) NOT NULL,
  AppliedUtc datetime2(3) NOT NULL CONSTRAINT DF_SbInboxModuleVersion_AppliedUtc DEFAULT SYSUTCDATETIME(),
  CONSTRAINT PK_SbInboxModuleVersion PRIMARY KEY (Module, Version)
);`;
export const SELECT_MODULE_VERSIONS =
  "SELECT Version AS version FROM dbo.SbInboxModuleVersion WHERE Module = @p1 ORDER BY Version;";
export const RECORD_MODULE_VERSION =
  "INSERT INTO dbo.SbInboxModuleVersion (Module, Version, Name) VALUES (@p1, @p2, @p3);";
/** Read-only: which version tables exist (visible to db_datareader), so the worker can tell "never migrated". */
export const SELECT_VERSION_TABLES = `SELECT
  CASE WHEN OBJECT_ID(N'dbo.SbInboxSchemaVersion', N'U') IS NULL THEN 0 ELSE 1 END AS inbox,
  CASE WHEN OBJECT_ID(N'dbo.SbInboxModuleVersion', N'U') IS NULL THEN 0 ELSE 1 END AS module;`;

export const statements: InboxStatements = {
  insertProcessedMarker:
    "INSERT INTO dbo.Inbox (MessageId, Consumer, ProcessedUtc) VALUES (@p1, @p2, SYSUTCDATETIME());",
  insertOpenClaim: "INSERT INTO dbo.Inbox (MessageId, Consumer) OUTPUT INSERTED.Id AS id VALUES (@p1, @p2);",
  isProcessed:
    "SELECT 1 AS found FROM dbo.Inbox WHERE MessageId = @p1 AND Consumer = @p2 AND ProcessedUtc IS NOT NULL;",
  readMarker: `SELECT Id AS id, CASE WHEN ProcessedUtc IS NULL THEN 0 ELSE 1 END AS processed
FROM dbo.Inbox WHERE MessageId = @p1 AND Consumer = @p2;`,
  markProcessed: `UPDATE dbo.Inbox SET ProcessedUtc = SYSUTCDATETIME()
WHERE MessageId = @p1 AND Consumer = @p2 AND ProcessedUtc IS NULL;`,
  markProcessedById: `UPDATE dbo.Inbox SET ProcessedUtc = SYSUTCDATETIME()
WHERE MessageId = @p1 AND Consumer = @p2 AND Id = @p3 AND ProcessedUtc IS NULL;`,
  // The predicate is evaluated on each row under its update lock, so a claim closed meanwhile stays.
  sweepStaleClaims: `DELETE FROM dbo.Inbox
WHERE ProcessedUtc IS NULL
  AND ReceivedUtc < DATEADD(millisecond, -@p2, DATEADD(second, -@p1, SYSUTCDATETIME()));`,
  countOpenClaims: "SELECT COUNT(*) AS n FROM dbo.Inbox WHERE ProcessedUtc IS NULL;",
  cleanupCutoff: "SELECT DATEADD(millisecond, -@p2, DATEADD(second, -@p1, SYSUTCDATETIME())) AS cutoff;",
  // Small batches stay under lock escalation (5,000 locks); ROWLOCK keeps them row locks and READPAST skips rows
  // a concurrent insert or claim holds instead of waiting on them, so cleanup neither blocks nor deadlocks writers.
  cleanupBatch: "DELETE TOP (@p2) FROM dbo.Inbox WITH (ROWLOCK, READPAST) WHERE ReceivedUtc < @p1;",
  ping: "SELECT 1 AS ok;",
};
