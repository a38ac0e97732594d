import type { Dialect } from "../domain/sql.ts";
import { driverErrorInChain } from "./error-links.ts";
import { sqlServerErrorNumbers } from "./sqlserver/error-chain.ts";

/**
 * An error a handler's own statement causes: never a database outage, whatever class of SQLSTATE it sits in or
 * whichever connection raised it. The worker fails that one message by the retry policy and never pauses for it.
 */
export interface StatementFault {
  /** The SQLSTATE (PostgreSQL), the error number or the driver's error code (SQL Server), as the error carries it. */
  readonly code: string;
  /** Codes of the same mistake on other versions of the server (SQL Server 2019's 2628 for 8152). */
  readonly also?: readonly string[];
  /** The server's name for it. */
  readonly name: string;
  /** What the handler did. */
  readonly mistake: string;
  /**
   * How the worker retries it: `permanent`, the permanent schedule (the same message can never succeed); `migration`,
   * the migration schedule, bounded, for a table or column a migration not yet applied would create.
   */
  readonly retry: "permanent" | "migration";
  /**
   * A statements handler's statement with this mistake is refused by the worker before anything is sent
   * (src/worker/statements.ts): dead-lettered at once as NotRetryable.
   */
  readonly refusedAsStatements?: boolean;
}

/**
 * Per dialect, the errors of a handler's statements the docs promise are the handler's: docs/failure-handling.md
 * shows these tables (test/unit/inbox/statement-faults-docs.test.ts keeps them equal), and
 * test/integration/statement-faults-*.test.ts raises each one on the real server through the worker.
 */
export const STATEMENT_FAULTS: Readonly<Record<Dialect, readonly StatementFault[]>> = {
  postgres: [
    {
      code: "08P01",
      name: "protocol_violation",
      mistake: "more or fewer parameters than the statement's placeholders `$1..$n`",
      retry: "permanent",
      refusedAsStatements: true,
    },
    {
      code: "42P02",
      name: "undefined_parameter",
      mistake: "`$n` in a statement given no parameters",
      retry: "permanent",
      refusedAsStatements: true,
    },
    {
      code: "42P18",
      name: "indeterminate_datatype",
      mistake: "a parameter the statement never refers to (`$2` used, `$1` not)",
      retry: "permanent",
      refusedAsStatements: true,
    },
    { code: "42601", name: "syntax_error", mistake: "a syntax error", retry: "permanent" },
    {
      code: "42883",
      name: "undefined_function",
      mistake: "a function or operator that does not exist for these types",
      retry: "permanent",
    },
    { code: "42P01", name: "undefined_table", mistake: "a table that does not exist", retry: "migration" },
    { code: "42703", name: "undefined_column", mistake: "a column that does not exist", retry: "migration" },
    {
      code: "22P02",
      name: "invalid_text_representation",
      mistake: "a value that does not parse as its type",
      retry: "permanent",
    },
    {
      code: "22001",
      name: "string_data_right_truncation",
      mistake: "a value too long for its column",
      retry: "permanent",
    },
    {
      code: "22003",
      name: "numeric_value_out_of_range",
      mistake: "a number out of range",
      retry: "permanent",
    },
    { code: "22012", name: "division_by_zero", mistake: "a division by zero", retry: "permanent" },
    { code: "23502", name: "not_null_violation", mistake: "NULL into a NOT NULL column", retry: "permanent" },
    {
      code: "23503",
      name: "foreign_key_violation",
      mistake: "a row whose referenced row does not exist",
      retry: "permanent",
    },
    {
      code: "23505",
      name: "unique_violation",
      mistake: "a duplicate key in a business table (never the inbox's own index)",
      retry: "permanent",
    },
    {
      code: "23514",
      name: "check_violation",
      mistake: "a row a CHECK constraint refuses",
      retry: "permanent",
    },
    {
      code: "TypeError",
      name: "refused before pg sends it",
      mistake:
        "parameters that are not an array, or a value pg cannot convert (a `toPostgres` or `toJSON` that throws)",
      retry: "permanent",
    },
  ],
  sqlserver: [
    {
      code: "8144",
      name: "procedure or function has too many arguments specified",
      mistake: "more arguments than the procedure takes",
      retry: "permanent",
    },
    {
      code: "201",
      name: "procedure or function expects parameter, which was not supplied",
      mistake: "a procedure called without a parameter it needs",
      retry: "permanent",
    },
    {
      code: "137",
      name: "must declare the scalar variable",
      mistake: "a `@pN` beyond the parameters given",
      retry: "permanent",
      refusedAsStatements: true,
    },
    { code: "102", name: "incorrect syntax", mistake: "a syntax error", retry: "permanent" },
    { code: "208", name: "invalid object name", mistake: "a table that does not exist", retry: "migration" },
    { code: "207", name: "invalid column name", mistake: "a column that does not exist", retry: "migration" },
    {
      code: "245",
      name: "conversion failed",
      mistake: "a value that does not convert to its type",
      retry: "permanent",
    },
    {
      code: "515",
      name: "cannot insert the value NULL",
      mistake: "NULL into a NOT NULL column",
      retry: "permanent",
    },
    {
      code: "547",
      name: "statement conflicted with a constraint",
      mistake: "a row a FOREIGN KEY or CHECK constraint refuses",
      retry: "permanent",
    },
    {
      code: "2627",
      also: ["2601"],
      name: "violation of a UNIQUE KEY or PRIMARY KEY constraint",
      mistake: "a duplicate key in a business table (never the inbox's own index)",
      retry: "permanent",
    },
    {
      code: "2628",
      also: ["8152"],
      name: "string or binary data would be truncated",
      mistake: "a value too long for its column",
      retry: "permanent",
    },
    {
      code: "8134",
      name: "divide by zero error encountered",
      mistake: "a division by zero",
      retry: "permanent",
    },
    {
      code: "8115",
      name: "arithmetic overflow",
      mistake: "a number out of range for its type",
      retry: "permanent",
    },
    {
      code: "EPARAM",
      name: "validation failed for parameter (mssql, tedious)",
      mistake:
        "a value the driver cannot send as its type (an object, an invalid Date, a bigint out of range)",
      retry: "permanent",
    },
  ],
};

const MIGRATION_CODES: Readonly<Record<Dialect, ReadonlySet<string>>> = {
  postgres: codesOf("postgres"),
  sqlserver: codesOf("sqlserver"),
};

function codesOf(dialect: Dialect): ReadonlySet<string> {
  return new Set(
    STATEMENT_FAULTS[dialect]
      .filter((f) => f.retry === "migration")
      .flatMap((f) => [f.code, ...(f.also ?? [])]),
  );
}

/**
 * Whether a failure is a database's "no such table" or "no such column" (the `migration` rows above), however
 * the handler wrapped it: the schema may be waiting for a migration that another process is applying, so the
 * worker retries it on the bounded migration schedule instead of the permanent one. By structured fields only:
 * PostgreSQL's SQLSTATE on a server error (it has a `severity`), SQL Server's error number.
 */
export function awaitsMigration(dialect: Dialect, error: unknown): boolean {
  const codes = MIGRATION_CODES[dialect];
  if (dialect === "sqlserver") return sqlServerErrorNumbers(error).some((n) => codes.has(String(n)));
  const awaiting = driverErrorInChain(error, (e) => {
    const { code, severity } = e as { code?: unknown; severity?: unknown };
    return typeof code === "string" && typeof severity === "string" && codes.has(code);
  });
  return awaiting !== undefined;
}
