import pg from "pg";
import type { ErrorClass } from "../../domain/outcome.ts";
import type { StatementOrigin } from "../core.ts";
import { NETWORK_ERROR_CODES } from "../network-errors.ts";
import { INBOX_UNIQUE_INDEX } from "./statements.ts";

const UNIQUE_VIOLATION = "23505";
/** serialization_failure, deadlock_detected. */
const TRANSIENT_SQLSTATES = new Set(["40001", "40P01"]);
/** admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections. */
const UNAVAILABLE_SQLSTATES = new Set(["57P01", "57P02", "57P03", "53300"]);

/**
 * Classifies an error from `pg` by its structured fields: SQLSTATE and constraint name, or the socket's code.
 *
 * `fromDriver` says the error was raised by a `pg` call (the adapter records which errors those are).
 * `pg` reports a lost connection ("Connection terminated unexpectedly", "... is not queryable",
 * a pool connect timeout) as a plain Error with no `code`: such an error, raised by the driver and not a
 * server-side DatabaseError, can only be about the connection, so it is `unavailable`. The same shape thrown
 * by handler code is an ordinary failure.
 */
export function classifyPostgresError(
  error: unknown,
  origin: StatementOrigin,
  fromDriver: boolean,
): ErrorClass {
  if (error instanceof pg.DatabaseError) {
    const code = error.code ?? "";
    if (code === UNIQUE_VIOLATION) {
      return origin === "marker" && error.constraint === INBOX_UNIQUE_INDEX ? "duplicate" : "permanent";
    }
    if (TRANSIENT_SQLSTATES.has(code)) return "transient";
    if (UNAVAILABLE_SQLSTATES.has(code) || code.startsWith("08")) return "unavailable";
    return "permanent";
  }
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === "string" && NETWORK_ERROR_CODES.has(code)) return "unavailable";
    if (
      error instanceof AggregateError &&
      error.errors.some((e) => classifyPostgresError(e, "other", true) === "unavailable")
    ) {
      return "unavailable"; // Node's happy-eyeballs connect raises one per address tried
    }
    // A TypeError or RangeError is a bad parameter value, refused before anything reached the server.
    const misuse = error instanceof TypeError || error instanceof RangeError;
    if (fromDriver && code === undefined && !misuse) return "unavailable";
  }
  return "permanent";
}
