// The SQL Server upstream of scripts/publishers-check.ts: a TDS server (Babelfish, the test aid beside the checkout,
// as scripts/sqlserver-tier.sh uses it) with the outbox migrated and a business table, when the machine has it.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import mssql from "mssql";
import { freePort } from "../src/embedded/free-port.ts";
import { createSqlServerOutboxStore } from "../src/outbox/sqlserver/store.ts";
import type { OutboxStore } from "../src/outbox/store.ts";

export interface SqlServerUpstream {
  /** mssql's (and SqlClient's) connection string for the upstream database. */
  readonly connectionString: string;
  /** host, port, user, password, database: pymssql's arguments. */
  readonly parts: string[];
  readonly store: OutboxStore;
  count(sql: string): Promise<number[]>;
  close(): Promise<void>;
}

/** Starts the TDS server at `start` (its start.sh) in `folder`; undefined when there is none. */
export async function startSqlServerUpstream(
  start: string,
  folder: string,
): Promise<SqlServerUpstream | undefined> {
  if (!existsSync(start)) return undefined;
  const dir = join(folder, "babelfish");
  const port = await freePort();
  const server = execFileSync(start, ["--port", String(port), "--dir", dir], { encoding: "utf8" })
    .trim()
    .split("\n")
    .at(-1)!;
  const stop = () => execFileSync(join(dirname(start), "stop.sh"), ["--dir", dir], { stdio: "ignore" });
  try {
    const admin = await new mssql.ConnectionPool(server).connect();
    await admin.request().batch("CREATE DATABASE sbinbox_upstream");
    await admin.close();
    const connectionString = `${server};Database=sbinbox_upstream`;
    const pool = await new mssql.ConnectionPool(connectionString).connect();
    const store = createSqlServerOutboxStore({ pool });
    await store.migrate();
    await pool
      .request()
      .batch("CREATE TABLE dbo.UpstreamChanges (NoteId int PRIMARY KEY, Language nvarchar(20) NOT NULL)");
    const get = (name: string) => new RegExp(`${name}=([^;]*)`, "i").exec(server)?.[1] ?? "";
    return {
      connectionString,
      parts: ["127.0.0.1", String(port), get("User Id"), get("Password"), "sbinbox_upstream"],
      store,
      count: async (sql) =>
        (await pool.request().query<{ n: number }>(sql)).recordset.map((r) => Number(r.n)),
      close: async () => {
        await store.close();
        await pool.close();
        stop();
      },
    };
  } catch (error) {
    stop();
    throw error;
  }
}
