import type { Dialect } from "../domain/sql.ts";
import { tokens } from "./transaction-guard.ts";

/**
 * The parameters a statement's text refers to, read by the transaction guard's tokenizer (outside strings, quoted
 * names, dollar quotes and comments): PostgreSQL's `$n`, SQL Server's `@pN` as this project binds them
 * (src/inbox/sqlserver/adapter.ts, `bindParameters`). `odd` holds a reference no parameter can bind (`@p0`, `@p01`).
 */
export function parameterReferences(
  sql: string,
  dialect: Dialect,
): { readonly numbers: ReadonlySet<number>; readonly odd: readonly string[] } {
  const cache = references[dialect];
  const known = cache.get(sql);
  if (known !== undefined) return known;
  const pattern = dialect === "postgres" ? /^\$(\d+)$/ : /^@P(\d+)$/;
  const numbers = new Set<number>();
  const odd: string[] = [];
  for (const token of tokens(sql, dialect)) {
    const match = pattern.exec(token);
    if (match === null) continue;
    if (dialect === "sqlserver" && match[1]!.startsWith("0")) odd.push(`@p${match[1]}`);
    else numbers.add(Number(match[1]));
  }
  const found = { numbers, odd };
  if (cache.size >= 1_000) cache.clear();
  if (sql.length <= 4_096) cache.set(sql, found);
  return found;
}

const references: Record<Dialect, Map<string, ReturnType<typeof parameterReferences>>> = {
  postgres: new Map(),
  sqlserver: new Map(),
};

/**
 * What is wrong between a statement's placeholders and the `count` parameters given to it, or undefined when they
 * agree. `strict` also reports a parameter the text never refers to on SQL Server, which the server accepts (an
 * unused parameter of sp_executesql) but which is almost always a placeholder forgotten; PostgreSQL always refuses
 * one (42P18, or 08P01 when it is above the highest reference).
 */
export function placeholderMismatch(
  sql: string,
  dialect: Dialect,
  count: number,
  strict = false,
): string | undefined {
  const { numbers, odd } = parameterReferences(sql, dialect);
  const mark = dialect === "postgres" ? "$" : "@p";
  if (odd.length > 0) return `it refers to ${odd[0]}, which no parameter binds (they are @p1..@pN)`;
  const highest = Math.max(0, ...numbers);
  if (highest > count)
    return `it refers to ${mark}${highest} but is given ${count} parameter${count === 1 ? "" : "s"}`;
  if (dialect === "sqlserver" && !strict) return undefined;
  for (let n = 1; n <= count; n += 1) {
    if (!numbers.has(n))
      return (
        `it is given ${count} parameter${count === 1 ? "" : "s"} but never refers to ${mark}${n}` +
        (dialect === "sqlserver" ? " (SQL Server accepts an unused parameter; PostgreSQL does not)" : "")
      );
  }
  return undefined;
}
