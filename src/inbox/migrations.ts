import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { SqlResult } from "../domain/sql.ts";

/** One forward-only migration: `NNNN_name.sql`, applied once, in order, inside a transaction. */
/**
 * A handler module's migrations (its business tables), applied by `sbinbox migrate` after the inbox's and
 * recorded under the module's name, so several modules and the inbox each keep their own numbering.
 */
export interface ModuleMigrations {
  readonly module: string;
  readonly migrations: readonly Migration[];
}

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
  /** The file it was read from, for errors. */
  readonly file?: string;
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
    if (!match) throw new MigrationFileError(join(dir, file), "is not named NNNN_name.sql");
    const version = Number(match[1]);
    const expected = migrations.length + 1;
    if (version !== expected) {
      const next = `${String(expected).padStart(4, "0")}_name.sql`;
      const taken = migrations[version - 1];
      throw new MigrationFileError(
        join(dir, file),
        taken
          ? `repeats number ${match[1]}, already used by ${taken.name}.sql (renumber it ${next})`
          : `leaves a gap (expected ${next} next)`,
      );
    }
    migrations.push({
      version,
      name: file.replace(/\.sql$/, ""),
      sql: await readFile(join(dir, file), "utf8"),
      file: join(dir, file),
    });
  }
  return migrations;
}

/** A migration folder that cannot be applied as it is: a file misnamed or misnumbered. */
export class MigrationFileError extends Error {
  override readonly name = "MigrationFileError";
  readonly file: string;
  constructor(file: string, problem: string) {
    super(`migration ${file} ${problem}`);
    this.file = file;
  }
}

/** A migration the database refused; names the file and the module it belongs to, with the database's reason. */
export class MigrationFailedError extends Error {
  override readonly name = "MigrationFailedError";
  readonly migration: string;
  /** `owner`: whose migration, as said in the message ("the inbox's", `module "notes"'s`). */
  constructor(migration: Migration, owner: string, cause: unknown) {
    super(
      `${owner} migration ${migration.file ?? migration.name} failed, nothing of this run was applied: ${(cause as Error)?.message ?? String(cause)}`,
      { cause },
    );
    this.migration = migration.name;
  }
}

/** Runs one migration, turning the database's refusal into an error that names the file and its module. */
export async function applying<T>(migration: Migration, owner: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    throw new MigrationFailedError(migration, owner, error);
  }
}

/**
 * The files one dialect's folder has and the other's lacks, by name: a module whose two folders differ deploys a
 * different schema on SQL Server than the one its tests ran on PostgreSQL.
 */
export async function dialectDifferences(folders: Partial<Record<string, string>>): Promise<string[]> {
  const entries = Object.entries(folders).filter((e): e is [string, string] => typeof e[1] === "string");
  if (entries.length < 2) return [];
  const names = await Promise.all(
    entries.map(async ([dialect, dir]) => {
      const files = await readdir(dir).catch(() => [] as string[]);
      return [dialect, new Set(files.filter((f) => f.endsWith(".sql")).map((f) => f.slice(0, -4)))] as const;
    }),
  );
  const problems: string[] = [];
  for (const [dialect, own] of names) {
    for (const [other, theirs] of names) {
      if (other === dialect) continue;
      const missing = [...own].filter((n) => !theirs.has(n)).sort();
      if (missing.length > 0) problems.push(`${dialect} has ${missing.join(", ")}, which ${other} has not`);
    }
  }
  return problems;
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

/**
 * Inbox migrations that a worker of the previous version cannot run beside (docs/inbox.md, "Moving to 0002"):
 * `sbinbox migrate` applies one to an inbox already in use only when told the old workers are stopped.
 */
export const STOPS_OLD_WORKERS: ReadonlySet<string> = new Set(["0002_inbox_markers"]);

/** The pending migrations among `pending` that need the old workers stopped: none on a new inbox (0001 pending). */
export function needingOldWorkersStopped(pending: readonly string[]): string[] {
  if (pending.includes("0001_inbox")) return [];
  return pending.filter((name) => STOPS_OLD_WORKERS.has(name));
}
