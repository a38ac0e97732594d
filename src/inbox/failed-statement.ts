import { driverErrorInChain } from "./error-links.ts";

/**
 * Which of a handler's statements an error is the database's answer to, so that the failure can name it (the log
 * line, the dead-letter description): the paths that send a handler's statements note each failure here, and the
 * worker reads it back from the error it is given, however the handler wrapped it. Kept beside the error object
 * (a WeakMap), so nothing changes in what the handler sees or throws.
 */
const statements = new WeakMap<object, string>();

/**
 * Records that `error` is what the database answered to `sql`. The first statement noted for an error stays, unless
 * `replace` (a caller that knows better than the path below it: the handler's own texts of a request it composed).
 */
export function noteFailedStatement(error: unknown, sql: string, replace = false): void {
  if (typeof error !== "object" || error === null) return;
  if (replace || !statements.has(error)) statements.set(error, sql);
}

/**
 * What names a handler's statements that went to the database as one request (SQL Server's composed batch): the
 * one statement, or all of them in order, since the server's line number of a rethrown error does not say which.
 */
export function statementsText(statements: readonly { readonly sql: string }[]): string {
  return statements.map((s) => s.sql.trim().replace(/;+$/u, "")).join("; ");
}

/**
 * The statement whose failure `error` is, or carries: itself, then its `cause`, an AggregateError's `errors`
 * (breadth first, a few links deep, as handlers wrap).
 */
export function failedStatement(error: unknown): string | undefined {
  const failed = driverErrorInChain(error, (e) => statements.has(e));
  return failed === undefined ? undefined : statements.get(failed);
}

/** A statement's text on one line and at most `max` characters: for a log line or a dead-letter description. */
export function statementExcerpt(sql: string, max = 160): string {
  const flat = sql.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 3)}...` : flat;
}
