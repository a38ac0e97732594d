// The handler module's SQL Server statements for `npm run check:tsql`: every `{ sqlserver: string }` reachable from
// any export of any module in the folder (handlers/ by default), however a team names and nests them, so a new
// handler's statements are parsed without anyone listing them here.
import { readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
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
