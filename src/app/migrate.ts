import type { HandlerModule } from "../domain/handler-module.ts";
import type { InboxStoreConfig } from "../inbox/index.ts";
import type { InboxStore, MigrationResult } from "../inbox/store.ts";
import { dialectDifferences } from "../inbox/migrations.ts";
import { loadHandlerModule, moduleMigrations } from "./handler-module.ts";

export interface MigrateOptions {
  /** The database: `{ kind: "postgres", url }` or `{ kind: "sqlserver", config }`, as for createInboxStore. */
  readonly database: InboxStoreConfig;
  /**
   * The handler module whose migrations follow the inbox's: the module itself, or a path or package name as
   * SBINBOX_HANDLERS takes it. Omitted: the inbox's alone.
   */
  readonly module?: HandlerModule | string;
  /** Told each warning (the module's two dialect folders differ); default: none. */
  readonly onWarning?: (warning: string) => void;
}

export interface MigrateResult extends MigrationResult {
  readonly warnings: readonly string[];
}

/**
 * What `sbinbox migrate` does, as a function (the test harness and a team's own scripts call it): the inbox's
 * pending migrations, then the module's, in one transaction. Needs DDL rights.
 */
export async function migrate(options: MigrateOptions): Promise<MigrateResult> {
  const module =
    typeof options.module === "string" ? await loadHandlerModule(options.module) : options.module;
  const store = await openStore(options.database);
  try {
    return await migrateStore(store, module, options.onWarning);
  } finally {
    await store.close();
  }
}

/** The migration on a store already open (the CLI's, which reports a firewall refusal itself). */
export async function migrateStore(
  store: InboxStore,
  module: HandlerModule | undefined,
  onWarning: (warning: string) => void = () => undefined,
): Promise<MigrateResult> {
  const warnings = module ? await moduleWarnings(module) : [];
  for (const warning of warnings) onWarning(warning);
  const { applied } = await store.migrate(module ? await moduleMigrations(module, store.dialect) : undefined);
  return { applied, warnings };
}

/** What is worth saying about a module before migrating it: its dialects' migration folders differ. */
export async function moduleWarnings(module: HandlerModule): Promise<string[]> {
  const differences = await dialectDifferences(module.migrations ?? {});
  return differences.map(
    (d) => `handler module "${module.name}": its migration folders differ between dialects: ${d}`,
  );
}

/** The store for the target, loading only that database's driver. */
export async function openStore(target: InboxStoreConfig): Promise<InboxStore> {
  if (target.kind === "postgres") {
    const { createPostgresInboxStore } = await import("../inbox/postgres/adapter.ts");
    return createPostgresInboxStore(target);
  }
  const { createSqlServerInboxStore } = await import("../inbox/sqlserver/adapter.ts");
  return createSqlServerInboxStore(target);
}
