import mssql from "mssql";
import { ConnectionError as TediousConnectionError } from "tedious";
import type { ErrorClass } from "../../domain/outcome.ts";
import type { StatementOrigin } from "../core.ts";

/** Cannot insert duplicate key row (unique index) / Violation of UNIQUE KEY or PRIMARY KEY constraint. */
const UNIQUE_VIOLATIONS = new Set([2601, 2627]);
/**
 * 1205 deadlock victim; 4060 cannot open database (failover); 10928/10929 resource limits; 40197 service
 * error while processing; 40501 service busy; 40613 database unavailable; 49918-49920 cannot process request.
 */
const TRANSIENT_NUMBERS = new Set([1205, 4060, 10928, 10929, 40197, 40501, 40613, 49918, 49919, 49920]);
/** Codes tedious and mssql give to a connection that is gone or cannot be made. */
const UNAVAILABLE_CODES = new Set([
  "ESOCKET",
  "ECLOSE",
  "ECONNCLOSED",
  "ENOCONN",
  "ENOTOPEN",
  "EINSTLOOKUP",
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
]);

interface Node {
  readonly error: object;
  readonly depth: number;
}

/**
 * Every error object inside what `mssql` and `tedious` raised: mssql's RequestError keeps the driver's error
 * as `originalError` (with the server's token as `info` on one path) and earlier errors of the same request as
 * `precedingErrors`; tedious raises an AggregateError when one request gets several error tokens, and for
 * connection attempts to several addresses.
 */
export function sqlServerErrorChain(error: unknown): object[] {
  const seen = new Set<object>();
  const out: object[] = [];
  const stack: Node[] = typeof error === "object" && error !== null ? [{ error, depth: 0 }] : [];
  while (stack.length > 0) {
    const { error: e, depth } = stack.pop()!;
    if (seen.has(e) || depth > 8) continue;
    seen.add(e);
    out.push(e);
    const record = e as Record<string, unknown>;
    const children: unknown[] = [record.originalError, record.info, record.cause];
    if (Array.isArray(record.precedingErrors)) children.push(...(record.precedingErrors as unknown[]));
    if (e instanceof AggregateError) children.push(...(e.errors as unknown[]));
    for (const child of children) {
      if (typeof child === "object" && child !== null) stack.push({ error: child, depth: depth + 1 });
    }
  }
  return out;
}

/** The SQL Server error numbers in the chain (mssql copies `number`; tedious sets it from the error token). */
export function sqlServerErrorNumbers(error: unknown): number[] {
  return sqlServerErrorChain(error)
    .map((e) => (e as { number?: unknown }).number)
    .filter((n): n is number => typeof n === "number");
}

/**
 * Classifies an error from `mssql`/`tedious` by error number and error code, never by message text (SQL Server
 * localizes messages by session language). A unique violation is `duplicate` only when the marker insert
 * raised it: the adapter awaits that statement on its own, so it knows; the same number from any other
 * statement (a business table's unique index) is `permanent`.
 */
export function classifySqlServerError(error: unknown, origin: StatementOrigin): ErrorClass {
  const chain = sqlServerErrorChain(error);
  const numbers = sqlServerErrorNumbers(error);
  if (numbers.some((n) => TRANSIENT_NUMBERS.has(n))) return "transient";
  const codes = chain
    .map((e) => (e as { code?: unknown }).code)
    .filter((c): c is string => typeof c === "string");
  const connectionLost = chain.some(
    (e) => e instanceof mssql.ConnectionError || e instanceof TediousConnectionError,
  );
  if (connectionLost || codes.some((c) => UNAVAILABLE_CODES.has(c))) return "unavailable";
  // A request timeout (tedious RequestError ETIMEOUT; a connect timeout is a ConnectionError, handled above).
  if (codes.includes("ETIMEOUT")) return "transient";
  if (numbers.some((n) => UNIQUE_VIOLATIONS.has(n))) return origin === "marker" ? "duplicate" : "permanent";
  return "permanent";
}
