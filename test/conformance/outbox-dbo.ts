import mssql from "mssql";
import type { BackendDatabase } from "./backends.ts";

const LOCK = `DECLARE @result int;
EXEC @result = sp_getapplock @Resource = N'sbinbox-test-outbox-dbo', @LockMode = N'Exclusive',
  @LockOwner = N'Transaction', @LockTimeout = 120000;
IF @result < 0 THROW 51000, N'the outbox suite: another run holds dbo''s outbox tables', 1;`;
const FOUND = `SELECT CASE WHEN OBJECT_ID(N'dbo.Outbox', N'U') IS NULL
  AND OBJECT_ID(N'dbo.SbOutboxSchemaVersion', N'U') IS NULL THEN 0 ELSE 1 END AS n`;
const DROP = `DROP TABLE IF EXISTS dbo.Outbox; DROP TABLE IF EXISTS dbo.SbOutboxSchemaVersion;`;

/**
 * The SQL Server outbox has no schema setting: its tables are dbo.Outbox and dbo.SbOutboxSchemaVersion wherever
 * it runs. In a run scoped to a schema inside a shared database (a team's Azure SQL development database), one test
 * at a time may have them, and they must go afterwards: this takes an application lock for the test, refuses to
 * touch an outbox the database already has (it could be the team's own), and returns what drops the tables and
 * lets the lock go. Elsewhere (a database of the run's own, PostgreSQL) there is nothing to do.
 */
export async function holdDboOutbox(db: BackendDatabase): Promise<() => Promise<void>> {
  const target = db.target;
  if (target.kind !== "sqlserver" || db.schema === undefined) return () => Promise.resolve();
  const pool = await new mssql.ConnectionPool({ ...target.config, pool: { max: 1 } }).connect();
  const tx = new mssql.Transaction(pool);
  try {
    await tx.begin();
    await tx.request().batch(LOCK);
    const found = (await tx.request().query<{ n: number }>(FOUND)).recordset[0]?.n;
    if (found !== 0)
      throw new Error(
        `database ${target.config.database} already has dbo.Outbox or dbo.SbOutboxSchemaVersion: the outbox suite ` +
          "creates and drops them (the outbox has no schema setting), so run it in a database without an outbox",
      );
  } catch (error) {
    await tx.rollback().catch(() => undefined);
    await pool.close();
    throw error;
  }
  return async () => {
    try {
      await tx.request().batch(DROP);
      await tx.commit();
    } finally {
      await pool.close();
    }
  };
}
