import { existsSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { HandlerModule } from "../domain/handler-module.ts";
import { ConfigError } from "../domain/errors.ts";
import type { Dialect } from "../domain/sql.ts";
import { loadMigrations } from "../inbox/migrations.ts";
import type { ModuleMigrations } from "../inbox/store.ts";

const SETTING = "SBINBOX_HANDLERS";
const MODULE_NAME = /^[a-z0-9][a-z0-9_-]{0,99}$/;

/**
 * The handler module named by SBINBOX_HANDLERS: a file path (relative to the working directory) or a package
 * name, whose default export (or `handlerModule` export) is a HandlerModule. Unset: the built-in example.
 */
export async function loadHandlerModule(specifier: string | undefined): Promise<HandlerModule> {
  if (specifier === undefined) return (await import("../example/module.ts")).exampleModule;
  const isPath = /^[./]/.test(specifier) || isAbsolute(specifier);
  const url = isPath ? pathToFileURL(resolve(process.cwd(), specifier)).href : specifier;
  let loaded: Record<string, unknown>;
  try {
    loaded = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    // A bare name is a package to Node; a newcomer's "handlers/index.ts" means the file in this folder.
    const hint =
      !isPath && existsSync(resolve(process.cwd(), specifier))
        ? `; a file path starts with ./ or /: did you mean "./${specifier}"?`
        : "";
    throw new ConfigError(SETTING, `cannot load "${specifier}" (${(error as Error).message})${hint}`);
  }
  return checkModule(loaded.default ?? loaded.handlerModule, specifier);
}

function checkModule(value: unknown, specifier: string): HandlerModule {
  const problem = (what: string) => new ConfigError(SETTING, `"${specifier}" ${what}`);
  if (typeof value !== "object" || value === null) {
    throw problem("exports no handler module (a default export with name, handlers and migrations)");
  }
  const module = value as Partial<HandlerModule>;
  if (typeof module.name !== "string" || !MODULE_NAME.test(module.name)) {
    throw problem("has no valid name (lower-case letters, digits, - and _; it keys the module's migrations)");
  }
  if (typeof module.handlers !== "function") throw problem("has no handlers() function");
  if (module.stop !== undefined && typeof module.stop !== "function")
    throw problem("has a stop that is not a function (called at shutdown to close what its handlers opened)");
  const migrations: unknown = module.migrations;
  if (migrations !== undefined && (typeof migrations !== "object" || migrations === null)) {
    throw problem("has migrations that are not { postgres?: folder, sqlserver?: folder }");
  }
  return module as HandlerModule;
}

/** The module's migrations for one dialect, read from its folder; none when it has no folder for the dialect. */
export async function moduleMigrations(module: HandlerModule, dialect: Dialect): Promise<ModuleMigrations> {
  const folder = module.migrations?.[dialect];
  return { module: module.name, migrations: folder ? await loadMigrations(folder) : [] };
}

/** The migrations `sbinbox migrate` has not applied yet; the worker refuses to start while any remain. */
export class SchemaNotMigratedError extends Error {
  readonly pending: readonly string[];
  constructor(pending: readonly string[]) {
    super(
      `the database schema is behind this worker: ${pending.join(", ")} not applied. ` +
        "Run `sbinbox migrate` (with the same SBINBOX_HANDLERS) as a user with DDL rights; " +
        "the worker only reads and writes rows",
    );
    this.name = "SchemaNotMigratedError";
    this.pending = pending;
  }
}
