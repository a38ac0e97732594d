import type { OutboxStatements } from "../statements.ts";

/**
 * Every T-SQL statement the SQL Server outbox sends, except the migration files themselves; `npm run check:tsql`
 * parses each one. Parameters are @p1..@pn, bound from the positional parameter array. Lists of ids and of rows
 * travel as one JSON parameter read by OPENJSON (compatibility level 130 or later, as on every Azure SQL database).
 */

export const ACQUIRE_MIGRATION_LOCK = `DECLARE @result int;
EXEC @result = sp_getapplock @Resource = @p1, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 120000;
IF @result < 0 THROW 51000, N'sbinbox migrate: could not take the outbox migration lock', 1;`;

export const CREATE_VERSION_TABLE = `IF OBJECT_ID(N'dbo.SbOutboxSchemaVersion', N'U') IS NULL
CREATE TABLE dbo.SbOutboxSchemaVersion (
  Version int NOT NULL CONSTRAINT PK_SbOutboxSchemaVersion PRIMARY KEY,
  Name nvarchar(200) NOT NULL,
  AppliedUtc datetime2(3) NOT NULL CONSTRAINT DF_SbOutboxSchemaVersion_AppliedUtc DEFAULT SYSUTCDATETIME()
);`;

export const SELECT_APPLIED_VERSIONS =
  "SELECT Version AS version FROM dbo.SbOutboxSchemaVersion ORDER BY Version;";
export const RECORD_VERSION = "INSERT INTO dbo.SbOutboxSchemaVersion (Version, Name) VALUES (@p1, @p2);";

const UNSENT = "SentUtc IS NULL AND SetAsideUtc IS NULL";

export const statements: OutboxStatements = {
  // INSERT ... SELECT ... ORDER BY assigns identity values in that order: the caller's order.
  insertRows: `INSERT INTO dbo.Outbox (MessageId, Type, [Key], Body, Properties, CorrelationId, TraceParent, TraceState)
OUTPUT INSERTED.Id AS id
SELECT e.messageId, e.type, e.[key], e.body, e.properties, e.correlationId, e.traceParent, e.traceState
FROM OPENJSON(@p1) AS j
CROSS APPLY OPENJSON(j.[value]) WITH (
  messageId nvarchar(128) '$.messageId',
  type nvarchar(200) '$.type',
  [key] nvarchar(400) '$.key',
  body nvarchar(max) '$.body',
  properties nvarchar(max) '$.properties',
  correlationId nvarchar(128) '$.correlationId',
  traceParent varchar(55) '$.traceParent',
  traceState varchar(512) '$.traceState'
) AS e
ORDER BY CAST(j.[key] AS int);`,
  notify: "",
  // UPDLOCK with READPAST: rows another relay is claiming right now are skipped, not waited on; ROWLOCK keeps
  // the locks on rows. READCOMMITTEDLOCK: with READ_COMMITTED_SNAPSHOT ON (Azure SQL's default) READ COMMITTED
  // reads row versions, and SQL Server refuses READPAST there (error 650) unless the read takes locks. The lease then keeps them from other relays while this one sends, and frees them if it dies.
  claim: `WITH c AS (
  SELECT TOP (@p1) Id, MessageId, Type, [Key], Body, Properties, CorrelationId, TraceParent, TraceState,
    Attempts, FirstAttemptUtc, LockedUntilUtc
  FROM dbo.Outbox WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
  WHERE ${UNSENT}
    AND (LockedUntilUtc IS NULL OR LockedUntilUtc <= SYSUTCDATETIME())
    AND (FirstAttemptUtc IS NULL OR FirstAttemptUtc > DATEADD(millisecond, -@p3, SYSUTCDATETIME()))
  ORDER BY Id
)
UPDATE c SET
  Attempts = Attempts + 1,
  FirstAttemptUtc = COALESCE(FirstAttemptUtc, SYSUTCDATETIME()),
  LockedUntilUtc = DATEADD(millisecond, @p2, SYSUTCDATETIME())
OUTPUT INSERTED.Id AS id, INSERTED.MessageId AS messageId, INSERTED.Type AS type, INSERTED.[Key] AS [key],
  INSERTED.Body AS body, INSERTED.Properties AS properties, INSERTED.CorrelationId AS correlationId,
  INSERTED.TraceParent AS traceParent, INSERTED.TraceState AS traceState, INSERTED.Attempts AS attempts,
  CASE WHEN DELETED.FirstAttemptUtc IS NULL THEN 1 ELSE 0 END AS firstTry;`,
  markSent: `UPDATE dbo.Outbox SET SentUtc = SYSUTCDATETIME(), LockedUntilUtc = NULL
WHERE Id IN (SELECT CAST([value] AS bigint) FROM OPENJSON(@p1));`,
  release: `UPDATE dbo.Outbox SET LockedUntilUtc = DATEADD(millisecond, @p2, SYSUTCDATETIME()),
  FirstAttemptUtc = CASE WHEN Id IN (SELECT CAST([value] AS bigint) FROM OPENJSON(@p3)) THEN NULL ELSE FirstAttemptUtc END
WHERE Id IN (SELECT CAST([value] AS bigint) FROM OPENJSON(@p1)) AND SentUtc IS NULL;`,
  setAside: `UPDATE dbo.Outbox SET SetAsideUtc = SYSUTCDATETIME(), Error = LEFT(@p2, 4000), LockedUntilUtc = NULL
WHERE Id = CAST(@p1 AS bigint);`,
  status: `SELECT
  COALESCE((SELECT TOP (1) CAST(DATEDIFF_BIG(millisecond, CreatedUtc, SYSUTCDATETIME()) AS bigint)
    FROM dbo.Outbox WHERE ${UNSENT} ORDER BY Id), 0) AS lagMs,
  (SELECT COUNT(*) FROM dbo.Outbox WHERE ${UNSENT}) AS unsent,
  (SELECT COUNT(*) FROM dbo.Outbox WHERE ${UNSENT}
     AND FirstAttemptUtc <= DATEADD(millisecond, -@p1, SYSUTCDATETIME())) AS stale,
  (SELECT COUNT(*) FROM dbo.Outbox WHERE SetAsideUtc IS NOT NULL) AS setAside;`,
  // Small batches stay under lock escalation; READPAST skips rows a relay holds instead of waiting on them;
  // READCOMMITTEDLOCK lets READPAST run when READ_COMMITTED_SNAPSHOT is ON (see the claim).
  cleanupBatch: `DELETE TOP (@p2) FROM dbo.Outbox WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
WHERE SentUtc < DATEADD(second, -@p1, SYSUTCDATETIME());`,
};
