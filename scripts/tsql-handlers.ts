// The handler module's SQL Server statements and migrations for `npm run check:tsql`: every `{ sqlserver: string }`
// reachable from any export of any module in the folder (handlers/ by default), however a team names and nests
// them, and every SQL Server migration folder of every module in it, so a new handler's statements and a nested
// module's migrations are parsed without anyone listing them here.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";

export interface Statement {
  name: string;
  sql: string;
}

/** The folder's modules: .ts and .js files, tests and declaration files left out. */
function modules(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return name === "node_modules" ? [] : modules(path);
      return /\.(ts|js)$/.test(name) && !/\.(test|spec|d)\.(ts|js)$/.test(name) ? [path] : [];
    });
}

/** Every `sqlserver` string under `value`, named by its path; each object visited once. */
function collect(value: unknown, name: string, out: Statement[], seen: Set<object>): void {
  if (value === null || typeof value !== "object" || seen.has(value)) return;
  seen.add(value);
  // A HandlerModule's `migrations` are folders (their files are parsed as migrations), not statements.
  const isModule = typeof (value as { handlers?: unknown }).handlers === "function";
  for (const [key, inner] of Object.entries(value)) {
    if (isModule && key === "migrations") continue;
    if (key === "sqlserver" && typeof inner === "string") out.push({ name: `${name}.sqlserver`, sql: inner });
    else collect(inner, `${name}.${key}`, out, seen);
  }
}

export async function handlerStatements(dir: string, root: string): Promise<Statement[]> {
  const out: Statement[] = [];
  const seen = new Set<object>();
  for (const file of modules(dir)) {
    const exports = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    for (const [name, value] of Object.entries(exports))
      collect(value, `${relative(root, file)}:${name}`, out, seen);
  }
  return out;
}

/** Every folder under `dir` (node_modules left out), `dir` itself first. */
function folders(dir: string): string[] {
  return [
    dir,
    ...readdirSync(dir)
      .sort()
      .filter((name) => name !== "node_modules" && statSync(join(dir, name)).isDirectory())
      .flatMap((name) => folders(join(dir, name))),
  ];
}

/**
 * The SQL Server migration folders of the folder's modules: each HandlerModule export's `migrations.sqlserver`, and
 * every `migrations/sqlserver` folder under it (a module whose index names its folders another way, or not yet
 * wired into the module, is still parsed). Existing folders only, each once, sorted.
 */
export async function handlerMigrationFolders(dir: string): Promise<string[]> {
  const found = new Set(folders(dir).filter((d) => /[/\\]migrations[/\\]sqlserver$/.test(d)));
  for (const file of modules(dir)) {
    const exports = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    for (const value of Object.values(exports)) {
      const module = value as { handlers?: unknown; migrations?: { sqlserver?: unknown } } | null;
      const folder = module?.migrations?.sqlserver;
      if (typeof module?.handlers === "function" && typeof folder === "string" && existsSync(folder))
        found.add(resolve(folder));
    }
  }
  return [...found].sort();
}

/** Every `.sql` file of the module's SQL Server migration folders, named by its path from `root`. */
export async function handlerMigrations(dir: string, root: string): Promise<Statement[]> {
  return (await handlerMigrationFolders(dir)).flatMap((folder) =>
    readdirSync(folder)
      .filter((f) => f.endsWith(".sql"))
      .sort()
      .map((f) => ({ name: relative(root, join(folder, f)), sql: readFileSync(join(folder, f), "utf8") })),
  );
}
