import pg from "pg";
import type { SqlResult } from "../domain/sql.ts";
import { createPostgresInboxStore } from "../inbox/postgres/adapter.ts";
import { postgresPoolConfig } from "../inbox/postgres/pool.ts";
import type { Database, OpenDatabaseOptions } from "./database-types.ts";

/** The PostgreSQL side of openDatabase; loaded only when the configuration names PostgreSQL. */
export function openPostgresDatabase(url: string, options: OpenDatabaseOptions): Database {
  const pool = new pg.Pool(postgresPoolConfig(url, options.maxConnections, options.timeouts));
  pool.on("error", () => undefined); // an idle client lost with a server restart; pg replaces it
  const store = createPostgresInboxStore({
    pool,
    preCheck: options.preCheck,
    schema: options.inboxSchema,
  });
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
