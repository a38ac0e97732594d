import { fileURLToPath } from "node:url";
import mssql from "mssql";
import type { Connection as TediousConnection } from "tedious";
import type { ErrorClass } from "../../domain/outcome.ts";
import type { SqlResult } from "../../domain/sql.ts";
import type { InboxDriver, InboxStoreOptions, InboxTransaction, StatementOrigin } from "../core.ts";
import type { Held, SessionQueries } from "../driver.ts";
import { InboxCore } from "../core.ts";
import { traceInboxDriver, traceInboxStore } from "../../telemetry/inbox-tracing.ts";
import {
  applying,
  loadMigrations,
  modulePrefix,
  pendingMigrationNames,
  type MigrationSet,
} from "../migrations.ts";
import type { MigrationResult, ModuleMigrations } from "../store.ts";
import { clientGraceMs, DEFAULT_DATABASE_TIMEOUTS, type DatabaseTimeouts } from "../timeouts.ts";
import { classifySqlServerError } from "./classify.ts";
import { sqlServerErrorNumbers } from "./error-chain.ts";
import { closeConnectionsReleasedInTransaction, sqlServerStatementRequests } from "./statement-requests.ts";
import {
  ACQUIRE_MIGRATION_LOCK,
  CREATE_SCHEMA,
  RELEASE_SESSION_LOCK,
  sqlServerSql,
  TRY_SESSION_LOCK,
} from "./statements.ts";
import { DEFAULT_INBOX_SCHEMA, sessionLockName } from "../schema-name.ts";
import { rollbackOrDiscard, type HeldConnection } from "./rollback.ts";
import { driverErrorInChain } from "../error-links.ts";

// A failed rollback's clean-up lives in rollback.ts; its importers find it here too.
export { discardAfterFailedRollback, rollbackOrDiscard } from "./rollback.ts";

/** The sp_getapplock resource that serializes concurrent migrate runs. */
const MIGRATION_LOCK_RESOURCE = "SbInboxMigrate";

export const SQLSERVER_MIGRATIONS_DIR = fileURLToPath(new URL("./migrations/", import.meta.url));

const inboxDefaultSql = sqlServerSql();

export const SQLSERVER_INBOX_MIGRATIONS: MigrationSet = {
  dir: SQLSERVER_MIGRATIONS_DIR,
  lockKey: MIGRATION_LOCK_RESOURCE,
  acquireLock: ACQUIRE_MIGRATION_LOCK,
  createVersionTable: inboxDefaultSql.CREATE_VERSION_TABLE,
  selectAppliedVersions: inboxDefaultSql.SELECT_APPLIED_VERSIONS,
  recordVersion: inboxDefaultSql.RECORD_VERSION,
};

export interface SqlServerInboxOptions extends InboxStoreOptions {
  /**
   * A ready pool (then the store does not close it), or what to build one from: an mssql config (for Entra
   * authentication pass `authentication: { type: "azure-active-directory-access-token", ... }`) or a
   * connection string.
   */
  readonly pool?: mssql.ConnectionPool;
  readonly config?: mssql.config | string;
  /** Bounds on every database wait, for a pool built from `config` (a given pool brings its own). */
  readonly timeouts?: DatabaseTimeouts;
  /** Pool errors outside a request are reported here; the pool replaces the connection on next use. */
  readonly onPoolError?: (error: Error) => void;
  /** The schema of the inbox's tables (default dbo); migrate creates it when missing. */
  readonly schema?: string;
}

export function createSqlServerInboxStore(options: SqlServerInboxOptions): InboxCore {
  // Traced: a span for the transaction and one per statement (no-ops until telemetry is started).
  return traceInboxStore(new InboxCore(traceInboxDriver(new SqlServerDriver(options)), options));
}

/** Binds positional parameters to @p1..@pn with explicit types, so plans are reused and seeks stay seeks. */
export function bindParameters(request: mssql.Request, params: readonly unknown[] = []): mssql.Request {
  params.forEach((value, index) => {
    request.input(`p${index + 1}`, sqlTypeOf(value), value);
  });
  return request;
}

/**
 * The pool's config: XACT_ABORT on (tedious's abortTransactionOnError) unless the caller says otherwise, so any
 * statement error dooms the transaction, as on PostgreSQL: a handler that catches an error and carries on cannot
 * commit half of its work.
 */
export function poolConfig(
  config: mssql.config | string,
  timeouts: DatabaseTimeouts = DEFAULT_DATABASE_TIMEOUTS,
): mssql.config {
  const base = typeof config === "string" ? mssql.ConnectionPool.parseConnectionString(config) : config;
  const given = base.beforeConnect;
  const pending = new Set<TediousConnection>();
  // Every wait bounded (a value the caller gives wins): connecting, a free pooled connection, each request.
  // A timed-out request is cancelled (tedious's cancelTimeout bounds that too) and fails with ETIMEOUT.
  return {
    connectionTimeout: timeouts.connectMs,
    requestTimeout: timeouts.statementMs,
    ...base,
    pool: { acquireTimeoutMillis: timeouts.connectMs, ...base.pool },
    options: {
      abortTransactionOnError: true,
      cancelTimeout: clientGraceMs(timeouts.statementMs),
      ...base.options,
    },
    beforeConnect: (connection) => {
      pending.add(connection);
      connection.once("connect", () => pending.delete(connection));
      connection.once("end", () => pending.delete(connection));
      keepLoginErrorNumber(connection);
      given?.(connection);
    },
    [PENDING_CONNECTS]: pending,
  } as mssql.config;
}

/** The tedious connections of a pool (built from poolConfig) still logging in: see closeSqlServerPool. */
const PENDING_CONNECTS = Symbol("sbinbox.pendingConnects");

/**
 * Closes a pool even while it is connecting. mssql refuses that ("Cannot close a pool while it is connecting")
 * and a connect can take the whole connect timeout, times tedious's own login retries: a worker stopped while
 * it waits for the database at start-up would keep the pool open until the shutdown backstop kills it. So the
 * logins in progress are ended (the pending connect then fails at once) before the pool is closed.
 */
export async function closeSqlServerPool(pool: mssql.ConnectionPool): Promise<void> {
  if (pool.connecting) {
    const { config } = pool as unknown as { config: { [PENDING_CONNECTS]?: Set<TediousConnection> } };
    const pending = config[PENDING_CONNECTS];
    for (const connection of pending ?? []) connection.close();
    // Joins the connect in progress: it settles once the ended login is reported.
    await pool.connect().catch(() => undefined);
  }
  await pool.close();
}

/**
 * Puts the server's error number on a failed login's error. tedious retries a transient login error (40613
 * during an Azure SQL failover) itself and marks the error `isTransient` only while retries remain, so the
 * error it finally reports is a bare ELOGIN with no number, indistinguishable from a refused password except
 * by its text. The number is in the ERROR token, which tedious emits as `errorMessage` before it fails the
 * connect; the `connect` listener runs in the same tick, before anyone can classify the error.
 */
function keepLoginErrorNumber(connection: TediousConnection): void {
  let lastNumber: number | undefined;
  connection.on("errorMessage", (token: { number?: unknown }) => {
    if (typeof token.number === "number") lastNumber = token.number;
  });
  connection.on("connect", (error?: Error) => {
    if (error && lastNumber !== undefined && (error as { number?: unknown }).number === undefined) {
      (error as { number?: number }).number = lastNumber;
    }
  });
}

function sqlTypeOf(value: unknown): mssql.ISqlType {
  if (typeof value === "string")
    return value.length <= 4000 ? mssql.NVarChar(4000) : mssql.NVarChar(mssql.MAX);
  if (typeof value === "number") {
    if (!Number.isInteger(value)) return mssql.Float();
    return Math.abs(value) <= 2_147_483_647 ? mssql.Int() : mssql.BigInt();
  }
  if (typeof value === "bigint") return mssql.BigInt();
  if (typeof value === "boolean") return mssql.Bit();
  if (value instanceof Date) return mssql.DateTime2(3);
  // As strings: one length for every key (plans reused), MAX only past what a varbinary(n) can hold.
  if (Buffer.isBuffer(value))
    return value.length <= 8000 ? mssql.VarBinary(8000) : mssql.VarBinary(mssql.MAX);
  return mssql.NVarChar(4000); // null or undefined: a typed NULL
}

function toResult<R>(result: mssql.IResult<unknown>): SqlResult<R> {
  return {
    rows: (result.recordset ?? []) as R[],
    rowCount: result.rowsAffected.reduce((sum, n) => sum + n, 0),
  };
}

/** The inbox on SQL Server / Azure SQL through `mssql` (tedious). */
/** Error 1205: this transaction was chosen as a deadlock's victim. */
const DEADLOCK_VICTIM = 1205;

export class SqlServerDriver implements InboxDriver {
  readonly dialect = "sqlserver" as const;
  readonly statements: ReturnType<typeof sqlServerSql>["statements"];
  readonly batchStatements: ReturnType<typeof sqlServerSql>["batchStatements"];
  readonly legacy: ReturnType<typeof sqlServerSql>["legacy"];
  readonly statementRequests: ReturnType<typeof sqlServerStatementRequests>;
  /** One request at a time on a connection (mssql refuses a second one on a transaction): handlers in turn. */
  readonly concurrentStatements = false;
  private readonly sql: ReturnType<typeof sqlServerSql>;
  private readonly schema: string;
  private readonly pool: mssql.ConnectionPool;
  private readonly ownsPool: boolean;
  private connecting: Promise<mssql.ConnectionPool> | undefined;
  /** One connection for the session locks (whileHolding): a request on the shared pool may take any connection. */
  private sessionPool: Promise<mssql.ConnectionPool> | undefined;
  /** Errors raised by mssql for the store's own calls, as opposed to handler code: see classifySqlServerError. */
  private readonly driverErrors = new WeakSet<object>();

  constructor(options: SqlServerInboxOptions) {
    this.schema = options.schema ?? DEFAULT_INBOX_SCHEMA.sqlserver;
    this.sql = sqlServerSql(this.schema);
    this.statements = this.sql.statements;
    this.batchStatements = this.sql.batchStatements;
    this.legacy = this.sql.legacy;
    this.statementRequests = sqlServerStatementRequests((rows) => this.batchStatements.insertMarkers(rows));
    if (options.pool) {
      this.pool = options.pool;
      this.ownsPool = false;
    } else {
      if (options.config === undefined) throw new Error("SQL Server inbox: give a pool or a config");
      this.pool = new mssql.ConnectionPool(poolConfig(options.config, options.timeouts));
      this.ownsPool = true;
    }
    this.pool.on("error", options.onPoolError ?? (() => undefined));
  }

  async query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> {
    return this.tagged(async () =>
      toResult<R>(await bindParameters((await this.ready()).request(), params).query(sql)),
    );
  }

  async begin(): Promise<InboxTransaction> {
    const tx = await this.tagged(async () => {
      const begun = new mssql.Transaction(await this.ready());
      await begun.begin(mssql.ISOLATION_LEVEL.READ_COMMITTED);
      return begun;
    });
    // Kept to close it if the rollback fails: mssql returns a connection to the pool even then, transaction open.
    const connection = (tx as unknown as HeldConnection)._acquiredConnection;
    let done = false;
    return {
      query: <R>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> =>
        this.tagged(async () => toResult<R>(await bindParameters(new mssql.Request(tx), params).query(sql))),
      commit: async () => {
        done = true;
        await this.tagged(() => tx.commit());
      },
      rollback: async () => {
        if (done) return;
        done = true;
        await rollbackOrDiscard(this.pool, tx, connection);
      },
    };
  }

  isDeadlock(error: unknown): boolean {
    return sqlServerErrorNumbers(error).includes(DEADLOCK_VICTIM);
  }

  classify(error: unknown, origin: StatementOrigin): ErrorClass {
    // The store's own error, even wrapped by a handler, is classed as the driver's; anything else as the handler's.
    const own = driverErrorInChain(error, (e) => this.driverErrors.has(e));
    return own === undefined
      ? classifySqlServerError(error, origin, false)
      : classifySqlServerError(own, origin, true);
  }

  /**
   * Applies pending migrations: given a migration set (the outbox's), that set; otherwise the inbox's in this store's
   * schema, then those of the handler module, if one is given.
   */
  async migrate(what?: ModuleMigrations | MigrationSet): Promise<MigrationResult> {
    const given = what !== undefined && "dir" in what ? what : undefined;
    const module = what !== undefined && !("dir" in what) ? what : undefined;
    const inbox = given === undefined;
    const set: MigrationSet = given ?? {
      ...SQLSERVER_INBOX_MIGRATIONS,
      createVersionTable: this.sql.CREATE_VERSION_TABLE,
      selectAppliedVersions: this.sql.SELECT_APPLIED_VERSIONS,
      recordVersion: this.sql.RECORD_VERSION,
    };
    const migrations = await loadMigrations(set.dir);
    const pool = await this.ready();
    const tx = new mssql.Transaction(pool);
    await tx.begin(mssql.ISOLATION_LEVEL.READ_COMMITTED);
    try {
      await bindParameters(new mssql.Request(tx), [set.lockKey]).query(set.acquireLock);
      if (inbox) await bindParameters(new mssql.Request(tx), [this.schema]).query(CREATE_SCHEMA);
      await new mssql.Request(tx).batch(set.createVersionTable);
      const rows = (await new mssql.Request(tx).query<{ version: number }>(set.selectAppliedVersions))
        .recordset;
      const applied = new Set(rows.map((r) => r.version));
      const names: string[] = [];
      for (const migration of migrations) {
        if (applied.has(migration.version)) continue;
        // a single batch: the files hold no GO
        await applying(migration, inbox ? "the inbox's" : "the outbox's", () =>
          new mssql.Request(tx).batch(inbox ? this.sql.migrationInSchema(migration.sql) : migration.sql),
        );
        await bindParameters(new mssql.Request(tx), [migration.version, migration.name]).query(
          set.recordVersion,
        );
        names.push(migration.name);
      }
      if (module) {
        await new mssql.Request(tx).batch(this.sql.CREATE_MODULE_VERSION_TABLE);
        const done = new Set(
          (
            await bindParameters(new mssql.Request(tx), [module.module]).query<{ version: number }>(
              this.sql.SELECT_MODULE_VERSIONS,
            )
          ).recordset.map((r) => r.version),
        );
        for (const migration of module.migrations) {
          if (done.has(migration.version)) continue;
          // As written: a module's tables live where its own statements name them, not in the inbox's schema.
          await applying(migration, `module "${module.module}"'s`, () =>
            new mssql.Request(tx).batch(migration.sql),
          );
          await bindParameters(new mssql.Request(tx), [
            module.module,
            migration.version,
            migration.name,
          ]).query(this.sql.RECORD_MODULE_VERSION);
          names.push(`${modulePrefix(module.module)}${migration.name}`);
        }
      }
      await tx.commit();
      return { applied: names };
    } catch (error) {
      await rollbackOrDiscard(pool, tx, (tx as unknown as HeldConnection)._acquiredConnection);
      throw error;
    }
  }

  pendingMigrations(module?: ModuleMigrations): Promise<string[]> {
    return pendingMigrationNames(
      { query: (t, p) => this.query(t, p), versionSql: this.sql },
      SQLSERVER_MIGRATIONS_DIR,
      module,
    );
  }

  async whileHolding<T>(name: string, work: (db: SessionQueries) => Promise<T>): Promise<Held<T>> {
    const lock = sessionLockName(this.schema, name);
    const pool = await this.tagged(() => this.lockConnection());
    const run = <R>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> =>
      this.tagged(async () => toResult<R>(await bindParameters(pool.request(), params).query(sql)));
    const got = await run<{ result: number }>(TRY_SESSION_LOCK, [lock]);
    if (!(Number(got.rows[0]?.result) >= 0)) return { held: false };
    try {
      return { held: true, value: await work({ query: run }) };
    } finally {
      // A lock not given back goes with its connection: the pool is closed, the next pass opens another.
      await run(RELEASE_SESSION_LOCK, [lock]).catch(() => this.dropLockConnection());
    }
  }

  async close(): Promise<void> {
    await this.dropLockConnection();
    if (this.ownsPool) await closeSqlServerPool(this.pool);
  }

  /** A pool of at most one connection, built like the store's, so a session lock and its statements share it. */
  private lockConnection(): Promise<mssql.ConnectionPool> {
    this.sessionPool ??= this.ready().then((shared) => {
      const { config } = shared as unknown as { config: mssql.config };
      const single = new mssql.ConnectionPool({ ...config, pool: { ...config.pool, min: 0, max: 1 } });
      single.on("error", () => undefined);
      return single.connect();
    });
    return this.sessionPool.catch((error: unknown) => {
      this.sessionPool = undefined;
      throw error;
    });
  }

  private async dropLockConnection(): Promise<void> {
    const pending = this.sessionPool;
    this.sessionPool = undefined;
    const pool = await pending?.catch(() => undefined);
    if (pool !== undefined) await closeSqlServerPool(pool).catch(() => undefined);
  }

  private async tagged<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      if (isObject(error)) this.driverErrors.add(error);
      throw error;
    }
  }

  /** Connects on first use, and again after a failed first connect; a connected pool heals its own connections. */
  private async ready(): Promise<mssql.ConnectionPool> {
    if (this.pool.connected) {
      closeConnectionsReleasedInTransaction(this.pool);
      return this.pool;
    }
    this.connecting ??= this.pool
      .connect()
      .then((pool) => {
        closeConnectionsReleasedInTransaction(pool);
        return pool;
      })
      .finally(() => {
        this.connecting = undefined;
      });
    return this.connecting;
  }
}

function isObject(value: unknown): value is object {
  return typeof value === "object" && value !== null;
}
