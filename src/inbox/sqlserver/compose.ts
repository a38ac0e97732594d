import type { BoundStatement } from "../store.ts";

/**
 * The most parameters one request carries. SQL Server allows 2,100 per request ("The incoming request has too
 * many parameters. The server supports a maximum of 2100 parameters", error 8003); mssql sends a parameterised
 * request as a call of sp_executesql, whose own @statement and @params are two of them.
 */
export const SQLSERVER_REQUEST_PARAMETERS = 2098;

/** The marker of one message ([consumer, messageId]): what a message's statements share a request with alone. */
export const MARKER_PARAMETERS = 2;

/** The most parameters one message's statements may take: they must fit in one request beside its marker. */
export const SQLSERVER_MESSAGE_PARAMETERS = SQLSERVER_REQUEST_PARAMETERS - MARKER_PARAMETERS;

/**
 * The error the composed marker insert raises when a marker of the request exists (the unique violation, 2601 or
 * 2627, caught and raised again as this): a statement of a handler that meets a unique index of its own keeps
 * 2601/2627, so the two are told apart by number, never by text.
 */
export const MARKER_EXISTS = { number: 51029, state: 29 } as const;

export interface ComposedRequest {
  readonly sql: string;
  readonly params: readonly unknown[];
}

/**
 * A transaction's requests. `whole`: one request that opens and commits the transaction itself (SET XACT_ABORT ON,
 * BEGIN TRANSACTION, ..., COMMIT TRANSACTION), sent on any pooled connection. Otherwise the requests hold no
 * transaction control and must run in order inside a transaction the caller opens and commits on one connection.
 */
export interface ComposedTransaction {
  readonly requests: readonly ComposedRequest[];
  readonly whole: boolean;
}

/**
 * `@pN` parameter references in a statement renumbered by `offset`, outside string literals, quoted and bracketed
 * identifiers and comments; `@@ROWCOUNT` and other variables are left alone. Returns the highest N it met, and
 * whether the text ends inside a `--` comment (a `;` appended on its line would be commented out). Parameters are
 * numbered from @p1: `@p0`, or a number written with a leading zero (`@p01`), would be renumbered onto a parameter
 * before the statement's own (the marker's MessageId) and is refused with a RangeError.
 */
export function renumberParameters(
  sql: string,
  offset: number,
): { sql: string; highest: number; endsInComment: boolean } {
  let out = "";
  let highest = 0;
  let endsInComment = false;
  let i = 0;
  const n = sql.length;
  const skipQuoted = (close: string): void => {
    // From the opening quote to its close; a doubled close is an escaped one.
    let j = i + 1;
    for (;;) {
      const k = sql.indexOf(close, j);
      if (k === -1) {
        j = n;
        break;
      }
      if (sql[k + 1] === close) {
        j = k + 2;
        continue;
      }
      j = k + 1;
      break;
    }
    out += sql.slice(i, j);
    i = j;
  };
  while (i < n) {
    const c = sql[i]!;
    if (c === "'" || c === '"') skipQuoted(c);
    else if (c === "[") skipQuoted("]");
    else if (c === "-" && sql[i + 1] === "-") {
      const k = sql.indexOf("\n", i);
      const j = k === -1 ? n : k;
      endsInComment = k === -1;
      out += sql.slice(i, j);
      i = j;
    } else if (c === "/" && sql[i + 1] === "*") {
      // T-SQL block comments nest.
      let depth = 0;
      let j = i;
      while (j < n) {
        if (sql[j] === "/" && sql[j + 1] === "*") {
          depth += 1;
          j += 2;
        } else if (sql[j] === "*" && sql[j + 1] === "/") {
          depth -= 1;
          j += 2;
          if (depth === 0) break;
        } else j += 1;
      }
      out += sql.slice(i, j);
      i = j;
    } else if (c === "@") {
      const match = /^@(@?)([\p{L}\p{N}_@#$]*)/u.exec(sql.slice(i, i + 200))!;
      const parameter = match[1] === "" ? /^[pP](\d+)$/.exec(match[2]!) : null;
      if (parameter) {
        if (parameter[1]!.startsWith("0"))
          throw new RangeError(`${match[0]}: parameters are numbered from @p1, without leading zeros`);
        const number = Number(parameter[1]);
        highest = Math.max(highest, number);
        out += `@p${number + offset}`;
      } else out += match[0];
      i += match[0].length;
    } else {
      out += c;
      i += 1;
    }
  }
  return { sql: out, highest, endsInComment };
}

/** A statement's text as one item of a batch: without the semicolons and blanks it ends with. */
function trimmed(sql: string): string {
  return sql.replace(/[\s;]+$/u, "");
}

/**
 * The marker insert, its unique violation raised again as MARKER_EXISTS. Under XACT_ABORT the violation dooms the
 * transaction, so the CATCH block rolls it back first; then the batch ends with the error and no statement after
 * the markers runs.
 */
function guardedMarkers(insert: string): string {
  return `BEGIN TRY
${trimmed(insert)};
END TRY
BEGIN CATCH
IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
IF ERROR_NUMBER() IN (2601, 2627) THROW ${MARKER_EXISTS.number}, N'sbinbox: an inbox marker of this request exists', ${MARKER_EXISTS.state};
THROW;
END CATCH;`;
}

/**
 * A request's statements inside TRY, rolled back and raised again in CATCH. XACT_ABORT does not cover every error:
 * RAISERROR does not honour it ([SET XACT_ABORT](https://learn.microsoft.com/sql/t-sql/statements/set-xact-abort-transact-sql)),
 * so the statements after it and the COMMIT would run while the client is told the request failed (marker and
 * writes committed, the message reported failed: review of issue 29, on Babelfish). Inside TRY an error of
 * severity above 10 goes to CATCH, which rolls the transaction back and ends the batch with the same error
 * (THROW keeps its number, so a business table's 2627 stays 2627, never the markers' 51029).
 */
function guardedStatements(parts: readonly string[]): string[] {
  if (parts.length === 0) return [];
  return [
    "BEGIN TRY",
    ...parts,
    "END TRY",
    "BEGIN CATCH",
    "IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;",
    "THROW;",
    "END CATCH;",
  ];
}

/**
 * The requests of one transaction: the markers (`markers`, [consumer, id1..idn] for its @p1..), then every
 * message's statements in order, their parameters renumbered after those before them in the same request. A
 * request takes at most `maxParameters`; a message's statements never straddle two requests (a message that does
 * not fit in a request of its own beside its marker is refused: RangeError).
 */
export function composeTransaction(
  markers: ComposedRequest,
  messages: readonly (readonly BoundStatement[])[],
  maxParameters: number = SQLSERVER_REQUEST_PARAMETERS,
): ComposedTransaction {
  const requests: { parts: string[]; params: unknown[] }[] = [
    { parts: [guardedMarkers(markers.sql)], params: [...markers.params] },
  ];
  for (const statements of messages) {
    const count = statements.reduce((sum, s) => sum + s.params.length, 0);
    if (count > maxParameters - MARKER_PARAMETERS)
      throw new RangeError(
        `a message's statements take ${count} parameters; one request takes at most ${maxParameters}, ` +
          `${MARKER_PARAMETERS} of them the message's inbox marker`,
      );
    let request = requests[requests.length - 1]!;
    if (request.params.length + count > maxParameters) {
      request = { parts: [], params: [] };
      requests.push(request);
    }
    append(request, statements);
  }
  if (requests.length === 1) {
    const [markerPart, ...statementParts] = requests[0]!.parts;
    return {
      whole: true,
      requests: [
        {
          sql: [
            "SET XACT_ABORT ON;",
            "BEGIN TRANSACTION;",
            markerPart!,
            ...guardedStatements(statementParts),
            "COMMIT TRANSACTION;",
          ].join("\n"),
          params: requests[0]!.params,
        },
      ],
    };
  }
  return {
    whole: false,
    requests: requests.map((r, i) => ({
      sql: (i === 0
        ? ["SET XACT_ABORT ON;", r.parts[0]!, ...guardedStatements(r.parts.slice(1))]
        : guardedStatements(r.parts)
      ).join("\n"),
      params: r.params,
    })),
  };
}

/** A message's statements as one request inside a transaction already open (the handle's path): no markers. */
export function composeStatements(statements: readonly BoundStatement[]): ComposedRequest {
  const request = { parts: [], params: [] };
  append(request, statements);
  return { sql: request.parts.join("\n"), params: request.params };
}

/** Adds statements to a request, their parameters numbered after the request's. */
function append(
  request: { parts: string[]; params: unknown[] },
  statements: readonly BoundStatement[],
): void {
  for (const statement of statements) {
    // Trimmed first, so that a comment on the last line is seen as the end it is.
    const renumbered = renumberParameters(trimmed(statement.sql), request.params.length);
    if (renumbered.highest > statement.params.length)
      throw new RangeError(
        `a statement refers to @p${renumbered.highest} but is given ${statement.params.length} parameters`,
      );
    // A text ending in a `--` comment ends its statement on a line of its own.
    request.parts.push(`${renumbered.sql}${renumbered.endsInComment ? "\n;" : ";"}`);
    request.params.push(...statement.params);
  }
}
