import { DefaultAzureCredential } from "@azure/identity";
import mssql from "mssql";
import pg from "pg";
import type { DatabaseConnection } from "../config/load.ts";
import type { Dialect, SqlExecutor, SqlResult } from "../domain/sql.ts";
import { createInboxStore, type InboxStore } from "../inbox/index.ts";

export interface Database {
  readonly dialect: Dialect;
  readonly store: InboxStore;
  /** Plain statements outside the inbox (the example's table set-up, the demo's counts). */
  readonly sql: SqlExecutor;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  readonly preCheck: boolean;
  readonly maxConnections: number;
}

/** Opens one pool for the configured database and builds the inbox store on it. Connects lazily. */
export function openDatabase(
  connection: Exclude<DatabaseConnection, { kind: "embedded" }>,
  options: OpenDatabaseOptions,
): Database {
  if (connection.kind === "postgres") {
    const pool = new pg.Pool({ connectionString: connection.url, max: options.maxConnections });
    pool.on("error", () => undefined); // an idle client lost with a server restart; pg replaces it
    const store = createInboxStore({ kind: "postgres", pool, preCheck: options.preCheck });
    return {
      dialect: "postgres",
      store,
      sql: {
        dialect: "postgres",
        async query<R>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>> {
          const result = await pool.query(text, params as unknown[] | undefined);
          return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
        },
      },
      async close() {
        await store.close();
        await pool.end();
      },
    };
  }
  const config: mssql.config | string =
    connection.kind === "sqlserver"
      ? connection.connectionString
      : ({
          server: connection.server,
          database: connection.database,
          options: { encrypt: true, trustServerCertificate: false },
          pool: { max: options.maxConnections },
          // tedious asks the credential for a token on every new connection, so tokens never go stale.
          authentication: { type: "token-credential", options: { credential: new DefaultAzureCredential() } },
        } as unknown as mssql.config);
  const pool = new mssql.ConnectionPool(config);
  const store = createInboxStore({ kind: "sqlserver", pool, preCheck: options.preCheck });
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
      async query<R>(text: string, params: readonly unknown[] = []): Promise<SqlResult<R>> {
        const request = (await connected()).request();
        params.forEach((value, i) => request.input(`p${i + 1}`, value));
        const result = await request.query(text);
        return {
          rows: (result.recordset ?? []) as R[],
          rowCount: result.rowsAffected.reduce((a, b) => a + b, 0),
        };
      },
    },
    async close() {
      await store.close();
      await pool.close();
    },
  };
}
