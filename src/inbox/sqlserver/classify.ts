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
 * SQL Server error numbers with a class other than `permanent` (a unique violation is decided by origin below).
 * From Microsoft.Data.SqlClient's baseline transient error list (SqlConfigurableRetryFactory.BaselineTransientErrors)
 * and Azure SQL's troubleshooting page; the login and "database not available" numbers are an outage here, as
 * PostgreSQL's class 28 and 57P03 are. docs/inbox.md shows this table; test/unit/sqlserver-classify.test.ts checks each entry.
 */
export const SQLSERVER_ERROR_NUMBERS: ReadonlyArray<{
  readonly number: number;
  readonly name: string;
  readonly errorClass: "unavailable" | "transient";
}> = [
  {
    number: 4060,
    name: "cannot open database requested by the login (failover, or not yet online)",
    errorClass: "unavailable",
  },
  { number: 18456, name: "login failed", errorClass: "unavailable" },
  { number: 40613, name: "database is not currently available", errorClass: "unavailable" },
  { number: 42108, name: "cannot connect to the SQL pool (paused)", errorClass: "unavailable" },
  { number: 42109, name: "the SQL pool is warming up", errorClass: "unavailable" },
  { number: 4221, name: "login to a read-secondary failed while it transitions", errorClass: "unavailable" },
  { number: 1204, name: "cannot obtain a LOCK resource now", errorClass: "transient" },
  { number: 1205, name: "deadlock victim", errorClass: "transient" },
  { number: 1222, name: "lock request time out period exceeded", errorClass: "transient" },
  { number: 10928, name: "resource limit reached", errorClass: "transient" },
  { number: 10929, name: "resource limit: minimum guarantee not met", errorClass: "transient" },
  { number: 40197, name: "service error while processing the request", errorClass: "transient" },
  {
    number: 40143,
    name: "the service has encountered an error processing the request",
    errorClass: "transient",
  },
  { number: 40501, name: "service is busy", errorClass: "transient" },
  {
    number: 40540,
    name: "the service has encountered an error processing the request",
    errorClass: "transient",
  },
  { number: 49918, name: "cannot process request: not enough resources", errorClass: "transient" },
  {
    number: 49919,
    name: "cannot process create or update request: too many operations",
    errorClass: "transient",
  },
  { number: 49920, name: "cannot process request: too many operations", errorClass: "transient" },
];

const SQLSERVER_ERROR_NUMBERS_BY_NUMBER = new Map(
  SQLSERVER_ERROR_NUMBERS.map((e) => [e.number, e.errorClass]),
);

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
export function classifySqlServerError(
  error: unknown,
  origin: StatementOrigin,
  fromDriver = true,
): ErrorClass {
  const chain = sqlServerErrorChain(error);
  const numbers = sqlServerErrorNumbers(error);
  const listed = numbers.map((n) => SQLSERVER_ERROR_NUMBERS_BY_NUMBER.get(n)).filter((c) => c !== undefined);
  if (listed.includes("unavailable")) return fromDriver ? "unavailable" : "permanent";
  if (listed.includes("transient")) return "transient";
  const codes = chain
    .map((e) => (e as { code?: unknown }).code)
    .filter((c): c is string => typeof c === "string");
  const connectionLost = chain.some(
    (e) => e instanceof mssql.ConnectionError || e instanceof TediousConnectionError,
  );
  // Only the store's own connection can mean an outage: the same codes from a handler's HTTP or cache client,
  // or from its own mssql pool to another server, are that handler's failure.
  if (connectionLost || codes.some((c) => UNAVAILABLE_CODES.has(c)))
    return fromDriver ? "unavailable" : "permanent";
  // A request timeout (tedious RequestError ETIMEOUT; a connect timeout is a ConnectionError, handled above).
  if (codes.includes("ETIMEOUT")) return "transient";
  if (numbers.some((n) => UNIQUE_VIOLATIONS.has(n))) return origin === "marker" ? "duplicate" : "permanent";
  return "permanent";
}
