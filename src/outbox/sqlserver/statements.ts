import type { OutboxStatements } from "../statements.ts";

/**
 * Every T-SQL statement the SQL Server outbox sends, except the migration files themselves; `npm run check:tsql`
 * parses each one. Parameters are @p1..@pn, bound from the positional parameter array. Lists of ids travel as one
 * JSON parameter read by OPENJSON (compatibility level 130 or later, as on every Azure SQL database); rows travel as
 * parameters of their own (insertRowsSql).
 */

/** Parameters of one outbox row in insertRowsSql, in this order. */
const OUTBOX_ROW_COLUMNS = [
  "MessageId",
  "Type",
  "[Key]",
  "Body",
  "Properties",
  "CorrelationId",
  "TraceParent",
  "TraceState",
  "SessionId",
] as const;

/**
 * Rows one insert takes: SQL Server takes at most 2,100 parameters a request, and sp_executesql, through which the
 * driver sends a parameterised statement, uses two of them (the statement and its parameter list), which leaves
 * 2,098 for the rows' values.
 */
export const SQLSERVER_INSERT_MAX_ROWS = Math.floor(2098 / OUTBOX_ROW_COLUMNS.length);

/**
 * The insert of `rows` outbox rows, [row 1's 9 values, row 2's, ...]; with `withSession` false without the
 * SessionId column ([row 1's 8 values, ...]), so that an enqueue without session keys still works on a database at
 * migration 0001 (docs/outbox.md, Upgrading). INSERT ... SELECT ... ORDER BY assigns
 * identity values in that order: the caller's order. Each value is a parameter of its own rather than a string
 * inside one JSON parameter read by OPENJSON: OPENJSON must unescape the body's quotes, which not every TDS server
 * does. No OUTPUT clause: nothing reads the ids, and not every TDS server takes OUTPUT together with ORDER BY.
 */
export function insertRowsSql(rows: number, withSession = true): string {
  if (!Number.isInteger(rows) || rows < 1 || rows > SQLSERVER_INSERT_MAX_ROWS)
    throw new RangeError(`an outbox insert takes 1 to ${SQLSERVER_INSERT_MAX_ROWS} rows, not ${rows}`);
  const names = withSession ? OUTBOX_ROW_COLUMNS : OUTBOX_ROW_COLUMNS.filter((c) => c !== "SessionId");
  const width = names.length;
  const values = Array.from(
    { length: rows },
    (_, r) => `(${r + 1}, ${names.map((_c, c) => `@p${r * width + c + 1}`).join(", ")})`,
  );
  const columns = names.join(", ");
  return `INSERT INTO dbo.Outbox (${columns})
SELECT ${names.map((c) => `v.${c}`).join(", ")}
FROM (VALUES
  ${values.join(",\n  ")}
) AS v (n, ${columns})
ORDER BY v.n;`;
}

/** The insert at one, two and the most rows, with and without SessionId, so that `npm run check:tsql` parses it. */
export const INSERT_ROWS_SAMPLES = [1, 2, SQLSERVER_INSERT_MAX_ROWS].flatMap((n) => [
  insertRowsSql(n),
  insertRowsSql(n, false),
]);

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

/** Unsent, not leased by another relay, and first tried inside the window (@p3 ms): a row's own conditions. */
const FREE = (t: string) => `${t}.SentUtc IS NULL AND ${t}.SetAsideUtc IS NULL
    AND (${t}.LockedUntilUtc IS NULL OR ${t}.LockedUntilUtc <= SYSUTCDATETIME())
    AND (${t}.FirstAttemptUtc IS NULL OR ${t}.FirstAttemptUtc > DATEADD(millisecond, -@p3, SYSUTCDATETIME()))`;

/**
 * FREE, and for a row with a session key the head of its key (no earlier row of the key unsent, set aside and stale
 * rows included): the rows a claim may take. The head look has no READPAST: a head another relay is claiming right
 * now must be seen, not skipped, so that its followers stay. It seeks IX_Outbox_UnsentSession (whose filter its
 * `e.SessionId IS NOT NULL` matches), whose columns a claim does not change, so it waits on no claim.
 */
const CLAIMABLE = (t: string) => `${FREE(t)}
    AND (${t}.SessionId IS NULL OR NOT EXISTS (
      SELECT 1 FROM dbo.Outbox AS e
      WHERE e.SessionId = ${t}.SessionId AND e.SessionId IS NOT NULL AND e.Id < ${t}.Id AND e.SentUtc IS NULL))`;

/**
 * The claim's candidates, from two indexes, so that no claim scans past a key's backlog in Id order: rows without
 * a key from IX_Outbox_UnsentNoSession, and each key's head, its lowest unsent Id, from IX_Outbox_UnsentSession
 * (one pass over that index's entries, a stream aggregate: no look per row). T-SQL has no LIMIT in a recursive
 * query, so the one-probe-per-key walk PostgreSQL's claim does is not written here.
 */
const CANDIDATES = `SELECT TOP (@p1) c.Id FROM (
      SELECT n.Id FROM (
        SELECT TOP (@p1) p.Id FROM dbo.Outbox AS p WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
        WHERE ${FREE("p")} AND p.SessionId IS NULL
        ORDER BY p.Id) AS n
      UNION ALL
      SELECT s.Id FROM (
        SELECT TOP (@p1) k.Id FROM (
          SELECT MIN(h.Id) AS Id FROM dbo.Outbox AS h
          WHERE h.SentUtc IS NULL AND h.SessionId IS NOT NULL
          GROUP BY h.SessionId) AS m
        JOIN dbo.Outbox AS k WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) ON k.Id = m.Id
        WHERE ${FREE("k")}
        ORDER BY k.Id) AS s
    ) AS c
    ORDER BY c.Id`;

export const statements: OutboxStatements = {
  insertRows: insertRowsSql(1),
  notify: "",
  // The inner read (CANDIDATES) picks the rows: UPDLOCK with READPAST skips rows another relay is claiming right now instead of
  // waiting on them, ROWLOCK keeps the locks on rows, and READCOMMITTEDLOCK lets READPAST run under
  // READ_COMMITTED_SNAPSHOT ON (Azure SQL's default), where SQL Server refuses it otherwise (error 650). The update
  // reads with the same hints and repeats the conditions, so a row is claimed only while still claimable: on a
  // server that ignores the hints, a second relay's update waits for the first's and then finds the row leased.
  // Not an UPDATE through a CTE: the same plan, but not every TDS server updates through one. The lease then keeps
  // the rows from other relays while this one sends, and frees them if it dies. firstAttemptBefore is the row's
  // FirstAttemptUtc before this claim, as OUTPUT DELETED gives it (a bare column: not every TDS server takes DELETED
  // inside an expression). The aliases are bracketed: some TDS servers fold an unquoted OUTPUT alias to lower case.
  claim: `UPDATE dbo.Outbox WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK) SET
  Attempts = Outbox.Attempts + 1,
  FirstAttemptUtc = COALESCE(Outbox.FirstAttemptUtc, SYSUTCDATETIME()),
  LockedUntilUtc = DATEADD(millisecond, @p2, SYSUTCDATETIME())
OUTPUT INSERTED.Id AS [id], INSERTED.MessageId AS [messageId], INSERTED.Type AS [type], INSERTED.[Key] AS [key],
  INSERTED.Body AS [body], INSERTED.Properties AS [properties], INSERTED.CorrelationId AS [correlationId],
  INSERTED.TraceParent AS [traceParent], INSERTED.TraceState AS [traceState], INSERTED.Attempts AS [attempts],
  INSERTED.SessionId AS [sessionId], DELETED.FirstAttemptUtc AS [firstAttemptBefore]
WHERE ${CLAIMABLE("Outbox")}
  AND Outbox.Id IN (
    ${CANDIDATES}
  );`,
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
