import mssql from "mssql";
import type { SqlResult } from "../domain/sql.ts";
import {
  bindParameters,
  closeSqlServerPool,
  createSqlServerInboxStore,
  poolConfig,
} from "../inbox/sqlserver/adapter.ts";
import type { Database, DatabaseTarget, OpenDatabaseOptions } from "./database-types.ts";

/** The SQL Server side of openDatabase; loaded only when the configuration names SQL Server. */
export async function openSqlServerDatabase(
  connection: Extract<DatabaseTarget, { kind: "sqlserver" | "sqlserver-entra" }>,
  options: OpenDatabaseOptions,
): Promise<Database> {
  let base: mssql.config;
  if (connection.kind === "sqlserver") {
    base = mssql.ConnectionPool.parseConnectionString(connection.connectionString);
  } else {
    // Loaded only for Entra authentication.
    const { DefaultAzureCredential } = await import("@azure/identity");
    base = {
      server: connection.server,
      database: connection.database,
      options: { encrypt: true, trustServerCertificate: false },
      // tedious asks the credential for a token on every new connection, so tokens never go stale.
      authentication: { type: "token-credential", options: { credential: new DefaultAzureCredential() } },
    } as unknown as mssql.config;
  }
  // poolConfig turns XACT_ABORT on, as for the pools the store builds itself; a Max Pool Size given wins.
  const pool = new mssql.ConnectionPool(
    poolConfig({ ...base, pool: { max: options.maxConnections, ...base.pool } }, options.timeouts),
  );
  const store = createSqlServerInboxStore({
    pool,
    preCheck: options.preCheck,
    schema: options.inboxSchema,
  });
  // The store connects the pool on first use; going through it avoids two concurrent connect() calls.
  const connected = async (): Promise<mssql.ConnectionPool> => {
    if (!pool.connected) await store.ping();
    return pool;
  };
  return {
    dialect: "sqlserver",
    store,
    sql: {
      dialect: "sqlserver",
      async query<R>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>> {
        const result = await bindParameters((await connected()).request(), params).query(text);
        return {
          rows: (result.recordset ?? []) as R[],
          rowCount: result.rowsAffected.reduce((a, b) => a + b, 0),
        };
      },
    },
    async close() {
      await store.close();
      await closeSqlServerPool(pool);
    },
  };
}
