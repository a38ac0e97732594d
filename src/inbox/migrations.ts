import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { SqlResult } from "../domain/sql.ts";
import type { ModuleMigrations } from "./store.ts";

/** One forward-only migration: `NNNN_name.sql`, applied once, in order, inside a transaction. */
export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

/**
 * One independent schema's migrations: its folder, its own version table, and the lock that serializes concurrent
 * runs. The inbox and the outbox are two sets on the same plumbing, so an upstream service can take the outbox
 * alone.
 */
export interface MigrationSet {
  readonly dir: string;
  /** The lock's parameter: an advisory-lock key on PostgreSQL, an sp_getapplock resource on SQL Server. */
  readonly lockKey: string;
  readonly acquireLock: string;
  readonly createVersionTable: string;
  readonly selectAppliedVersions: string;
  readonly recordVersion: string;
}

const FILE = /^(\d{4})_([a-z0-9_]+)\.sql$/;

/** Reads a dialect's migration folder; refuses gaps and repeated numbers, which would make order ambiguous. */
export async function loadMigrations(dir: string): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => f.endsWith(".sql")).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const match = FILE.exec(file);
    if (!match) throw new Error(`migration file "${file}" in ${dir} is not named NNNN_name.sql`);
    const version = Number(match[1]);
    const expected = migrations.length + 1;
    if (version !== expected) throw new Error(`migration ${file} in ${dir}: expected number ${expected}`);
    migrations.push({
      version,
      name: file.replace(/\.sql$/, ""),
      sql: await readFile(join(dir, file), "utf8"),
    });
  }
  return migrations;
}

/** The migrations of `all` whose version is not in `applied`, named as `sbinbox migrate` reports them. */
export function notApplied(all: readonly Migration[], applied: ReadonlySet<number>, prefix = ""): string[] {
  return all.filter((m) => !applied.has(m.version)).map((m) => `${prefix}${m.name}`);
}

/** How a module's applied migrations are named in results and errors: `module:0001_name`. */
export function modulePrefix(module: string): string {
  return `${module}:`;
}

/** What a store reads the applied versions with: its own statements, through its own pool. */
export interface VersionReader {
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
  readonly versionSql: {
    readonly SELECT_VERSION_TABLES: string;
    readonly SELECT_APPLIED_VERSIONS: string;
    readonly SELECT_MODULE_VERSIONS: string;
  };
}

/**
 * The migrations in `dir` (the inbox's) and of the module that are not applied yet, read-only: what the worker
 * checks at start, since its database user has data rights alone.
 */
export async function pendingMigrationNames(
  db: VersionReader,
  dir: string,
  module?: ModuleMigrations,
): Promise<string[]> {
  const sql = db.versionSql;
  const migrations = await loadMigrations(dir);
  const tables = (await db.query<{ inbox: unknown; module: unknown }>(sql.SELECT_VERSION_TABLES)).rows[0];
  const versions = async (text: string, params?: readonly unknown[]) =>
    new Set((await db.query<{ version: number }>(text, params)).rows.map((r) => r.version));
  const applied = tables?.inbox ? await versions(sql.SELECT_APPLIED_VERSIONS) : new Set<number>();
  const pending = notApplied(migrations, applied);
  if (module) {
    const done = tables?.module
      ? await versions(sql.SELECT_MODULE_VERSIONS, [module.module])
      : new Set<number>();
    pending.push(...notApplied(module.migrations, done, modulePrefix(module.module)));
  }
  return pending;
}
