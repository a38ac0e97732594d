import type { BackendDatabase } from "./backends.ts";

/**
 * What a server lacks, found by probing the server feature itself on scratch objects of this run, never through the
 * project's own statements: a broken project statement must fail its test, not turn it into a skip. Each field is a
 * reason to skip, or undefined when the server has the feature. Only the server's own "no such thing" answer counts
 * as lacking it; any other error is thrown (it is this run's problem, not the server's).
 */
export interface ServerLacks {
  /** sys.dm_exec_requests (other sessions' lock waits). */
  readonly view?: string;
  /** A hinted read that waits on a row another session holds (READCOMMITTEDLOCK under LOCK_TIMEOUT 0: error 1222). */
  readonly hintedWait?: string;
  /** CURRENT_TRANSACTION_ID(). */
  readonly transactionId?: string;
  /** WAITFOR DELAY. */
  readonly waitfor?: string;
}

/**
 * Babelfish answers every unsupported object, function or statement with one error number of its own and
 * PostgreSQL's message; SQL Server has a number for each (208, 195; WAITFOR is always there).
 */
const BABELFISH_ERROR = 33557097;

interface ServerError {
  readonly number?: number;
  readonly message: string;
}

function serverError(error: unknown): ServerError {
  const e = error as { number?: unknown; message?: unknown; originalError?: { number?: unknown } };
  const number = typeof e.number === "number" ? e.number : e.originalError?.number;
  return { number: typeof number === "number" ? number : undefined, message: String(e.message ?? error) };
}

/** Runs `probe`; the reason when the error is the server's "no such thing" (`matches`), otherwise rethrows. */
async function lacking(
  probe: () => Promise<unknown>,
  matches: (e: ServerError) => boolean,
  reason: string,
): Promise<string | undefined> {
  try {
    await probe();
    return undefined;
  } catch (error) {
    const e = serverError(error);
    if (matches(e)) return `${reason} (error ${e.number}: ${e.message})`;
    throw error;
  }
}

const noObject = (e: ServerError) =>
  e.number === 208 || (e.number === BABELFISH_ERROR && /relation .* does not exist/.test(e.message));
const noFunction = (e: ServerError) =>
  e.number === 195 || (e.number === BABELFISH_ERROR && /function .* does not exist/.test(e.message));
const noStatement = (e: ServerError) =>
  e.number === BABELFISH_ERROR && /is not currently supported/.test(e.message);

/** SQL Server probes, exported for `npm run check:tsql`'s parse. `t` is the scratch table, schema-qualified. */
export const featureProbeSql = (t: string) => ({
  view: `SELECT TOP (0) 1 AS n FROM sys.dm_exec_requests`,
  transactionId: `SELECT CURRENT_TRANSACTION_ID() AS id`,
  waitfor: `WAITFOR DELAY '00:00:00.001'`,
  createScratch: `CREATE TABLE ${t} (Id int NOT NULL PRIMARY KEY)`,
  holdRow: `INSERT INTO ${t} (Id) VALUES (1)`,
  // The setting is put back in the same batch (TRY/CATCH keeps the batch running): the connection goes back to a pool.
  hintedRead: `SET LOCK_TIMEOUT 0;
DECLARE @n int = 0;
BEGIN TRY
  SELECT @n = COUNT(*) FROM ${t} WITH (READCOMMITTEDLOCK) WHERE Id = 1;
  SET @n = 0;
END TRY
BEGIN CATCH
  SET @n = ERROR_NUMBER();
END CATCH;
SET LOCK_TIMEOUT -1;
SELECT @n AS n;`,
  dropScratch: `DROP TABLE ${t}`,
});

/** Probes the server `db` is on. PostgreSQL has every feature the suites need (pg_stat_activity, lock_timeout). */
export async function probeServer(
  db: Pick<BackendDatabase, "raw" | "schema" | "target">,
): Promise<ServerLacks> {
  if (db.target.kind === "postgres") return {};
  const sql = featureProbeSql(`[${db.schema ?? "dbo"}].FeatureProbe_${process.pid}`);
  const view = await lacking(() => db.raw.query(sql.view), noObject, "no sys.dm_exec_requests");
  const transactionId = await lacking(
    async () => {
      const tx = await db.raw.begin();
      try {
        await tx.query(sql.transactionId);
      } finally {
        await tx.rollback();
      }
    },
    noFunction,
    "no CURRENT_TRANSACTION_ID()",
  );
  const waitfor = await lacking(() => db.raw.query(sql.waitfor), noStatement, "no WAITFOR");
  return { view, transactionId, waitfor, hintedWait: await hintedWait(db, sql) };
}

async function hintedWait(
  db: Pick<BackendDatabase, "raw">,
  sql: ReturnType<typeof featureProbeSql>,
): Promise<string | undefined> {
  await db.raw.query(sql.createScratch);
  try {
    const holder = await db.raw.begin();
    try {
      await holder.query(sql.holdRow);
      const { rows } = await db.raw.query<{ n: unknown }>(sql.hintedRead);
      const n = Number(rows[0]?.n);
      if (n === 1222) return undefined;
      if (n === 0)
        return "a hinted read (READCOMMITTEDLOCK under LOCK_TIMEOUT 0) does not wait on a row another session holds";
      throw new Error(`the hinted-read probe failed with error ${n}`);
    } finally {
      await holder.rollback();
    }
  } finally {
    await db.raw.query(sql.dropScratch);
  }
}
