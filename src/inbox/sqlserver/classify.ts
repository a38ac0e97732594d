import mssql from "mssql";
import { ConnectionError as TediousConnectionError } from "tedious";
import type { ErrorClass } from "../../domain/outcome.ts";
import type { StatementOrigin } from "../core.ts";
import { NETWORK_ERROR_CODES } from "../network-errors.ts";
import { sqlServerErrorChain, sqlServerErrorNumbers } from "./error-chain.ts";

export { sqlServerErrorChain, sqlServerErrorNumbers };

/** Cannot insert duplicate key row (unique index) / Violation of UNIQUE KEY or PRIMARY KEY constraint. */
const UNIQUE_VIOLATIONS = new Set([2601, 2627]);
/**
 * 1205 deadlock victim; 4060 cannot open database (failover); 10928/10929 resource limits; 40197 service
 * error while processing; 40501 service busy; 40613 database unavailable; 49918-49920 cannot process request.
 */
const TRANSIENT_NUMBERS = new Set([1205, 4060, 10928, 10929, 40197, 40501, 40613, 49918, 49919, 49920]);
/** Codes tedious and mssql give to a connection that is gone or cannot be made, beside Node's own. */
const UNAVAILABLE_CODES = new Set([
  ...NETWORK_ERROR_CODES,
  "ESOCKET",
  "ECLOSE",
  "ECONNCLOSED",
  "ENOCONN",
  "ENOTOPEN",
  "EINSTLOOKUP",
]);

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
