import type { DatabaseConnection } from "../config/load.ts";
import type { Dialect, SqlExecutor } from "../domain/sql.ts";
import type { InboxStore } from "../inbox/store.ts";
import type { DatabaseTimeouts } from "../inbox/timeouts.ts";
import type { PreCheckMode } from "../inbox/core.ts";

export interface Database {
  readonly dialect: Dialect;
  readonly store: InboxStore;
  /** Plain statements outside the inbox (the example's table set-up, the demo's counts). */
  readonly sql: SqlExecutor;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  readonly preCheck: PreCheckMode;
  readonly maxConnections: number;
  /** The schema of the inbox's tables; undefined: the dialect's default (dbo, public). */
  readonly inboxSchema?: string;
  /** Bounds on every database wait; the defaults when omitted. */
  readonly timeouts?: DatabaseTimeouts;
}

export type DatabaseTarget = Exclude<DatabaseConnection, { kind: "embedded" }>;

/**
 * Opens one pool for the configured database and builds the inbox store on it. Connects lazily. Only the
 * configured database's driver is loaded: mssql with tedious and @azure/identity cost a worker on PostgreSQL
 * about 60 MB resident for nothing.
 */
export async function openDatabase(
  connection: DatabaseTarget,
  options: OpenDatabaseOptions,
): Promise<Database> {
  if (connection.kind === "postgres") {
    const { openPostgresDatabase } = await import("./database-postgres.ts");
    return openPostgresDatabase(connection.url, options);
  }
  const { openSqlServerDatabase } = await import("./database-sqlserver.ts");
  return openSqlServerDatabase(connection, options);
}
