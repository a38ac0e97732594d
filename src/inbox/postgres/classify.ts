import pg from "pg";
import type { ErrorClass } from "../../domain/outcome.ts";
import type { StatementOrigin } from "../core.ts";
import { NETWORK_ERROR_CODES } from "../network-errors.ts";
import { INBOX_UNIQUE_INDEX } from "./statements.ts";

const UNIQUE_VIOLATION = "23505";

/**
 * SQLSTATEs with a class other than `permanent`, from PostgreSQL's Appendix A (Error Codes). A whole class is
 * given by its two characters; an exact code wins over its class. Anything not listed is `permanent`, and so is
 * `08P01`, listed to keep it out of its class: the server raises protocol_violation for a statement bound with
 * more or fewer parameters than it has placeholders, the handler's mistake on a connection that stays fine.
 * docs/inbox.md shows this table; test/unit/inbox/postgres-classify.test.ts checks each entry.
 */
export const POSTGRES_SQLSTATES: ReadonlyArray<{
  readonly code: string;
  readonly name: string;
  readonly errorClass: Exclude<ErrorClass, "duplicate">;
}> = [
  { code: "08", name: "connection_exception (the whole class)", errorClass: "unavailable" },
  {
    code: "08P01",
    name: "protocol_violation (a statement bound with the wrong number of parameters)",
    errorClass: "permanent",
  },
  {
    code: "28",
    name: "invalid_authorization_specification (the whole class: login refused)",
    errorClass: "unavailable",
  },
  {
    code: "3D000",
    name: "invalid_catalog_name (the database does not exist, or not yet)",
    errorClass: "unavailable",
  },
  { code: "53300", name: "too_many_connections", errorClass: "unavailable" },
  { code: "57P01", name: "admin_shutdown", errorClass: "unavailable" },
  { code: "57P02", name: "crash_shutdown", errorClass: "unavailable" },
  {
    code: "57P03",
    name: "cannot_connect_now (starting up, shutting down, recovering)",
    errorClass: "unavailable",
  },
  {
    code: "57P05",
    name: "idle_session_timeout (the server closed an idle connection)",
    errorClass: "unavailable",
  },
  { code: "40001", name: "serialization_failure", errorClass: "transient" },
  { code: "40P01", name: "deadlock_detected", errorClass: "transient" },
  { code: "55P03", name: "lock_not_available (lock_timeout)", errorClass: "transient" },
  { code: "57014", name: "query_canceled (statement_timeout)", errorClass: "transient" },
  { code: "25P03", name: "idle_in_transaction_session_timeout", errorClass: "transient" },
  { code: "53000", name: "insufficient_resources", errorClass: "transient" },
  { code: "53100", name: "disk_full", errorClass: "transient" },
  { code: "53200", name: "out_of_memory", errorClass: "transient" },
];

const BY_CODE = new Map(POSTGRES_SQLSTATES.map((e) => [e.code, e.errorClass]));

/** The class of a SQLSTATE by the table above: the exact code first, then its two-character class. */
export function classifySqlState(code: string): Exclude<ErrorClass, "duplicate"> {
  return BY_CODE.get(code) ?? BY_CODE.get(code.slice(0, 2)) ?? "permanent";
}

/**
 * Classifies an error from `pg` by its structured fields: SQLSTATE and constraint name, or the socket's code.
 *
 * `fromDriver` says the error was raised by the store's own `pg` calls (the adapter records which errors those
 * are). Only those can mean `unavailable`: a handler's HTTP or cache client failing with ECONNREFUSED says
 * nothing about the database, and pausing the worker for it would stall healthy messages. `pg` reports a lost
 * connection ("Connection terminated unexpectedly", "... is not queryable", a pool connect timeout, a query read
 * timeout) as a plain Error with no `code`: raised by the driver and not a server-side DatabaseError, it can
 * only be about the connection.
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
    const errorClass = classifySqlState(code);
    // A server error object built by handler code (its own pg client to another database) is its own failure.
    return errorClass === "unavailable" && !fromDriver ? "permanent" : errorClass;
  }
  if (!fromDriver) return "permanent";
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
    if (code === undefined && !misuse) return "unavailable";
  }
  return "permanent";
}
