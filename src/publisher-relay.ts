/**
 * The outbox relay for an upstream service's own process (`sbinbox-publisher/relay`): startRelay, the outbox
 * stores and the sender. Importing it loads no database driver, no zod, no OpenTelemetry SDK and nothing of the
 * worker: a store loads its driver (`pg`, or `mssql` with `tedious`, optional peer dependencies of
 * sbinbox-publisher) when it is opened, with the inbox's shared driver and migrations code. Nothing here runs at
 * import time.
 */
import { fileURLToPath } from "node:url";
import type { Dialect } from "./domain/sql.ts";
import type { PostgresOutboxOptions, PostgresOutboxStore } from "./outbox/postgres/store.ts";
import type { SqlServerOutboxOptions } from "./outbox/sqlserver/store.ts";
import type { OutboxStore } from "./outbox/store.ts";

export {
  startRelay,
  checkRelaySettings,
  DEFAULT_RELAY_SETTINGS,
  type Relay,
  type RelayOptions,
  type RelayCounters,
  type RelaySettings,
} from "./outbox/relay.ts";
export type { OutboxStore, OutboxStatus } from "./outbox/store.ts";
export type { PostgresOutboxOptions, PostgresOutboxStore } from "./outbox/postgres/store.ts";
export type { SqlServerOutboxOptions } from "./outbox/sqlserver/store.ts";
export {
  createOutboxSender,
  type OutboxSender,
  type OutboxSenderOptions,
  type OutboxMessage,
  type SendReport,
} from "./servicebus/outbox-sender.ts";
export { createServiceBusClient, type ServiceBusClient, type ServiceBusTarget } from "./servicebus/client.ts";
export type { ReadinessReport } from "./http/health.ts";
export type { MigrationResult } from "./inbox/store.ts";

/**
 * The outbox on PostgreSQL, from a connection URL or your own `pg.Pool` (not ended on close). Loads `pg`; rejects
 * with what to install when it is missing. `store.migrate()` applies the outbox's migrations.
 */
export async function openPostgresOutboxStore(options: PostgresOutboxOptions): Promise<PostgresOutboxStore> {
  const { createPostgresOutboxStore } = await loadDriver(
    () => import("./outbox/postgres/store.ts"),
    ["pg"],
    "the PostgreSQL outbox store needs the pg package",
    "npm install pg",
  );
  return createPostgresOutboxStore(options);
}

/**
 * The outbox on SQL Server or Azure SQL, from your own `mssql.ConnectionPool` (not closed on close), an mssql
 * config (Entra ID: `authentication: { type: "token-credential", ... }`) or a connection string. Loads `mssql` and
 * `tedious`; rejects with what to install when they are missing. Polls only (SQL Server has no NOTIFY).
 */
export async function openSqlServerOutboxStore(options: SqlServerOutboxOptions): Promise<OutboxStore> {
  const { createSqlServerOutboxStore } = await loadDriver(
    () => import("./outbox/sqlserver/store.ts"),
    ["mssql", "tedious"],
    "the SQL Server outbox store needs the mssql package (which brings tedious)",
    "npm install mssql",
  );
  return createSqlServerOutboxStore(options);
}

/**
 * Where the outbox's SQL migrations are (numbered .sql files, applied in name order), for services that apply
 * schema changes with their own tool instead of `store.migrate()`.
 */
export function outboxMigrationsDir(dialect: Dialect): string {
  return fileURLToPath(new URL(`./outbox/${dialect}/migrations/`, import.meta.url));
}

/**
 * Imports a store module; when that fails because one of `packages` is not installed (they are optional peers,
 * which npm does not install by itself), says which and how instead of Node's bare ERR_MODULE_NOT_FOUND.
 */
async function loadDriver<M>(
  load: () => Promise<M>,
  packages: readonly string[],
  needs: string,
  install: string,
): Promise<M> {
  try {
    return await load();
  } catch (error) {
    const e = error as { code?: unknown; message?: unknown };
    const missing = packages.find((name) => String(e.message).includes(`'${name}'`));
    if (e.code === "ERR_MODULE_NOT_FOUND" && missing)
      throw new Error(
        `sbinbox-publisher/relay: ${needs}, and ${missing} is not installed: run \`${install}\` (it is an optional peer dependency)`,
        { cause: error },
      );
    throw error;
  }
}
