import { loadHandlerModule, moduleMigrations } from "../app/handler-module.ts";
import { parsers } from "../config/schema.ts";
import { ConfigError } from "../domain/errors.ts";
import type { HandlerModule } from "../domain/handler-module.ts";
import type { InboxStore, InboxStoreConfig } from "../inbox/index.ts";

/** The database to migrate, from the environment (exactly one of the two variables). */
export function migrateTarget(env: NodeJS.ProcessEnv): InboxStoreConfig {
  const url = env.SBINBOX_POSTGRES_URL?.trim();
  const connectionString = env.SBINBOX_SQLSERVER_CONNECTION_STRING?.trim();
  if (url && connectionString) {
    throw new ConfigError(
      "SBINBOX_POSTGRES_URL, SBINBOX_SQLSERVER_CONNECTION_STRING",
      "set only one: the inbox lives in one database",
    );
  }
  if (url) return { kind: "postgres", url, maxConnections: 1 };
  if (connectionString) return { kind: "sqlserver", config: connectionString };
  throw new ConfigError("SBINBOX_POSTGRES_URL or SBINBOX_SQLSERVER_CONNECTION_STRING", "not set");
}

/** The store for the target, loading only that database's driver. */
async function openStore(target: InboxStoreConfig): Promise<InboxStore> {
  if (target.kind === "postgres") {
    const { createPostgresInboxStore } = await import("../inbox/postgres/adapter.ts");
    return createPostgresInboxStore(target);
  }
  const { createSqlServerInboxStore } = await import("../inbox/sqlserver/adapter.ts");
  return createSqlServerInboxStore(target);
}

/** SBINBOX_HANDLERS, validated as the worker validates it. */
function handlersSetting(env: NodeJS.ProcessEnv): string | undefined {
  const raw = env.SBINBOX_HANDLERS;
  if (raw === undefined || raw.trim() === "") return undefined;
  const parsed = parsers.SBINBOX_HANDLERS.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError("SBINBOX_HANDLERS", parsed.error.issues[0]?.message ?? "invalid");
  }
  return parsed.data;
}

/**
 * `sbinbox migrate`: applies pending migrations, the inbox's and then those of the handler module SBINBOX_HANDLERS
 * names (the example's when unset); a no-op when none are pending. Run by the deployment with DDL rights.
 */
export async function run(
  _argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  out: (line: string) => void = (line) => process.stdout.write(`${line}\n`),
  err: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<number> {
  let target: InboxStoreConfig;
  let module: HandlerModule;
  try {
    target = migrateTarget(env);
    module = await loadHandlerModule(handlersSetting(env));
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    err(`sbinbox migrate: ${error.message}`);
    return 2;
  }
  const store = await openStore(target);
  try {
    const { applied } = await store.migrate(await moduleMigrations(module, store.dialect));
    out(
      applied.length === 0 ? "sbinbox migrate: up to date" : `sbinbox migrate: applied ${applied.join(", ")}`,
    );
    return 0;
  } finally {
    await store.close();
  }
}
