import { DoNotRetryError } from "../domain/errors.ts";
import type { MessageContext, StatementsHandler } from "../domain/handler.ts";
import type { Dialect } from "../domain/sql.ts";
import { renumberParameters, SQLSERVER_MESSAGE_PARAMETERS } from "../inbox/sqlserver/compose.ts";
import { statementExcerpt } from "../inbox/failed-statement.ts";
import type { BoundStatement } from "../inbox/store.ts";
import { placeholderMismatch } from "../inbox/placeholders.ts";
import { refusedStatement } from "../inbox/transaction-guard.ts";

/**
 * A statements handler's statements for one message, resolved to the store's dialect and checked before any is
 * sent. What `statements()` throws is the handler's failure, judged by the retry policy like a transactional
 * handler's throw. What it returns that can never run (not a list of statements, no text for this dialect,
 * transaction control, a savepoint or a DECLARE, more parameters than a SQL Server request takes, a reference to
 * a parameter it does not give or to @p0, on PostgreSQL parameters its placeholders `$1..$n` do not match, which
 * the server would refuse with 08P01 or 42P18) is the handler's bug, the same for every delivery: a
 * DoNotRetryError, so the message is dead-lettered at once as NotRetryable with a description naming the handler,
 * the statement and what is wrong.
 */
export function resolveStatements<T>(
  handler: StatementsHandler<T>,
  body: T,
  context: MessageContext,
  dialect: Dialect,
): BoundStatement[] {
  const given: unknown = handler.statements(body, context);
  const wrong = (what: string) =>
    new DoNotRetryError(`statements handler "${handler.type}": ${what}; no statement of it was sent`);
  if (!Array.isArray(given)) throw wrong("statements() returned no array of { sql, params? }");
  let parameters = 0;
  const bound = given.map((statement: unknown, index): BoundStatement => {
    const at = `statement ${index + 1}`;
    if (typeof statement !== "object" || statement === null)
      throw wrong(`${at} is not an object { sql, params? }`);
    const { sql, params } = statement as { sql?: unknown; params?: unknown };
    const text = typeof sql === "object" && sql !== null ? (sql as Record<string, unknown>)[dialect] : sql;
    if (typeof text !== "string" || text.trim() === "")
      throw wrong(`${at} has no SQL text for ${dialect} (give a string or { postgres, sqlserver })`);
    if (params !== undefined && !Array.isArray(params)) throw wrong(`${at}'s params are not an array`);
    const values: readonly unknown[] = params ?? [];
    const refused = refusedStatement(text, dialect);
    if (refused !== undefined) throw wrong(`${at}: ${refused}`);
    const together = refusedStatement(text, dialect, "statements");
    if (together !== undefined)
      throw wrong(
        `${at}: ${together} (the statements are sent together, in a batch with other messages' in one ` +
          "transaction: a savepoint would reach past them, and a DECLARE would be made again by the next message's)",
      );
    if (dialect === "sqlserver") {
      let highest: number;
      try {
        highest = renumberParameters(text, 0).highest;
      } catch (error) {
        // @p0 or @p01: renumbered, it would bind a parameter before the statement's own (the marker's MessageId).
        throw wrong(`${at}: ${(error as Error).message}`);
      }
      if (highest > values.length)
        throw wrong(`${at} refers to @p${highest} but gives ${values.length} parameters`);
    } else {
      const mismatch = placeholderMismatch(text, dialect, values.length);
      if (mismatch !== undefined) throw wrong(`${at} (${statementExcerpt(text)}): ${mismatch}`);
    }
    parameters += values.length;
    return { sql: text, params: values };
  });
  if (dialect === "sqlserver" && parameters > SQLSERVER_MESSAGE_PARAMETERS)
    throw wrong(
      `its statements take ${parameters} parameters, more than the ${SQLSERVER_MESSAGE_PARAMETERS} one SQL ` +
        "Server request takes beside the inbox marker (2,100 per request, two of them sp_executesql's own)",
    );
  return bound;
}
