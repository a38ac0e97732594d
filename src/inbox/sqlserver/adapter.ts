import { fileURLToPath } from "node:url";
import mssql from "mssql";
import type { ErrorClass } from "../../domain/outcome.ts";
import type { SqlResult } from "../../domain/sql.ts";
import type { InboxDriver, InboxStoreOptions, InboxTransaction, StatementOrigin } from "../core.ts";
import { InboxCore } from "../core.ts";
import { traceInboxDriver, traceInboxStore } from "../../telemetry/inbox-tracing.ts";
import { loadMigrations, modulePrefix, notApplied } from "../migrations.ts";
import type { MigrationResult, ModuleMigrations } from "../store.ts";
import { classifySqlServerError } from "./classify.ts";
import { ACQUIRE_MIGRATION_LOCK, CREATE_SCHEMA, sqlServerSql } from "./statements.ts";
import { DEFAULT_INBOX_SCHEMA } from "../schema-name.ts";

/** The sp_getapplock resource that serializes concurrent migrate runs. */
const MIGRATION_LOCK_RESOURCE = "SbInboxMigrate";

export const SQLSERVER_MIGRATIONS_DIR = fileURLToPath(new URL("./migrations/", import.meta.url));

export interface SqlServerInboxOptions extends InboxStoreOptions {
  /**
   * A ready pool (then the store does not close it), or what to build one from: an mssql config (for Entra
   * authentication pass `authentication: { type: "azure-active-directory-access-token", ... }`) or a
   * connection string.
   */
  readonly pool?: mssql.ConnectionPool;
  readonly config?: mssql.config | string;
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
export function poolConfig(config: mssql.config | string): mssql.config {
  const base = typeof config === "string" ? mssql.ConnectionPool.parseConnectionString(config) : config;
  return { ...base, options: { abortTransactionOnError: true, ...base.options } };
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
  if (Buffer.isBuffer(value)) return mssql.VarBinary(mssql.MAX);
  return mssql.NVarChar(4000); // null or undefined: a typed NULL
}

function toResult<R>(result: mssql.IResult<unknown>): SqlResult<R> {
  return {
    rows: (result.recordset ?? []) as R[],
    rowCount: result.rowsAffected.reduce((sum, n) => sum + n, 0),
  };
}

/** The inbox on SQL Server / Azure SQL through `mssql` (tedious). */
export class SqlServerDriver implements InboxDriver {
  readonly dialect = "sqlserver" as const;
  readonly statements: ReturnType<typeof sqlServerSql>["statements"];
  private readonly sql: ReturnType<typeof sqlServerSql>;
  private readonly schema: string;
  private readonly pool: mssql.ConnectionPool;
  private readonly ownsPool: boolean;
  private connecting: Promise<mssql.ConnectionPool> | undefined;

  constructor(options: SqlServerInboxOptions) {
    this.schema = options.schema ?? DEFAULT_INBOX_SCHEMA.sqlserver;
    this.sql = sqlServerSql(this.schema);
    this.statements = this.sql.statements;
    if (options.pool) {
      this.pool = options.pool;
      this.ownsPool = false;
    } else {
      if (options.config === undefined) throw new Error("SQL Server inbox: give a pool or a config");
      this.pool = new mssql.ConnectionPool(poolConfig(options.config));
      this.ownsPool = true;
    }
    this.pool.on("error", options.onPoolError ?? (() => undefined));
  }

  async query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> {
    const pool = await this.ready();
    return toResult<R>(await bindParameters(pool.request(), params).query(sql));
  }

  async begin(): Promise<InboxTransaction> {
    const pool = await this.ready();
    const tx = new mssql.Transaction(pool);
    await tx.begin(mssql.ISOLATION_LEVEL.READ_COMMITTED);
    let done = false;
    return {
      query: async <R>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> =>
        toResult<R>(await bindParameters(new mssql.Request(tx), params).query(sql)),
      commit: async () => {
        done = true;
        await tx.commit();
      },
      rollback: async () => {
        if (done) return;
        done = true;
        try {
          await tx.rollback();
        } catch {
          // Already rolled back by the server (an aborting error) or the connection is gone.
        }
      },
    };
  }

  classify(error: unknown, origin: StatementOrigin): ErrorClass {
    return classifySqlServerError(error, origin);
  }

  async migrate(module?: ModuleMigrations): Promise<MigrationResult> {
    const migrations = await loadMigrations(SQLSERVER_MIGRATIONS_DIR);
    const pool = await this.ready();
    const tx = new mssql.Transaction(pool);
    await tx.begin(mssql.ISOLATION_LEVEL.READ_COMMITTED);
    try {
      await bindParameters(new mssql.Request(tx), [MIGRATION_LOCK_RESOURCE]).query(ACQUIRE_MIGRATION_LOCK);
      await bindParameters(new mssql.Request(tx), [this.schema]).query(CREATE_SCHEMA);
      await new mssql.Request(tx).batch(this.sql.CREATE_VERSION_TABLE);
      const rows = (await new mssql.Request(tx).query<{ version: number }>(this.sql.SELECT_APPLIED_VERSIONS))
        .recordset;
      const applied = new Set(rows.map((r) => r.version));
      const names: string[] = [];
      for (const migration of migrations) {
        if (applied.has(migration.version)) continue;
        // a single batch: the files hold no GO
        await new mssql.Request(tx).batch(this.sql.migrationInSchema(migration.sql));
        await bindParameters(new mssql.Request(tx), [migration.version, migration.name]).query(
          this.sql.RECORD_VERSION,
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
          await new mssql.Request(tx).batch(migration.sql);
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
      try {
        await tx.rollback();
      } catch {
        // see begin().rollback
      }
      throw error;
    }
  }

  async pendingMigrations(module?: ModuleMigrations): Promise<string[]> {
    const migrations = await loadMigrations(SQLSERVER_MIGRATIONS_DIR);
    const tables = (await this.query<{ inbox: number; module: number }>(this.sql.SELECT_VERSION_TABLES))
      .rows[0];
    const applied = tables?.inbox
      ? new Set(
          (await this.query<{ version: number }>(this.sql.SELECT_APPLIED_VERSIONS)).rows.map(
            (r) => r.version,
          ),
        )
      : new Set<number>();
    const pending = notApplied(migrations, applied);
    if (module) {
      const done = tables?.module
        ? new Set(
            (
              await this.query<{ version: number }>(this.sql.SELECT_MODULE_VERSIONS, [module.module])
            ).rows.map((r) => r.version),
          )
        : new Set<number>();
      pending.push(...notApplied(module.migrations, done, modulePrefix(module.module)));
    }
    return pending;
  }

  async close(): Promise<void> {
    if (this.ownsPool) await this.pool.close();
  }

  /** Connects on first use, and again after a failed first connect; a connected pool heals its own connections. */
  private async ready(): Promise<mssql.ConnectionPool> {
    if (this.pool.connected) return this.pool;
    this.connecting ??= this.pool.connect().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }
}
