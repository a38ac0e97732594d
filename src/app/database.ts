import type { Database, DatabaseTarget, OpenDatabaseOptions } from "./database-types.ts";

export type { Database, DatabaseTarget, OpenDatabaseOptions } from "./database-types.ts";

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
