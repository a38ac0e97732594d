import {
  placeholderMismatch,
  resolveStatements,
  type BoundStatement,
  type Dialect,
  type MessageContext,
  type SqlExecutor,
  type SqlResult,
  type StatementsHandler,
} from "sbinbox";

/** One statement a handler sent through a fake transaction. */
export interface RecordedStatement {
  readonly sql: string;
  readonly params: readonly unknown[];
}

export interface FakeTransactionOptions {
  /** The dialect the handler sees (`tx.dialect`); default "postgres". */
  readonly dialect?: Dialect;
  /**
   * Answers each statement: rows to return, or throw to fail it as the database would. Default: no rows, one row
   * counted.
   */
  readonly respond?: (
    sql: string,
    params: readonly unknown[],
  ) => Partial<SqlResult<unknown>> | Promise<Partial<SqlResult<unknown>>>;
}

export interface FakeTransaction extends SqlExecutor {
  /** Every statement sent, in order. */
  readonly statements: RecordedStatement[];
}

/**
 * A stand-in for the inbox transaction, for a unit test of one transactional handler alone: it records what the
 * handler sends and answers as `respond` says. Of the SQL it checks only that the placeholders (`$1..$n`, SQL
 * Server's `@p1..@pN`) and the parameters agree, as the database would refuse them (it throws an Error naming the
 * statement, before `respond` sees it); the harness (a real database) is where statements are proven, so keep
 * these tests to a handler's own decisions.
 */
export function fakeTransaction(options: FakeTransactionOptions = {}): FakeTransaction {
  const statements: RecordedStatement[] = [];
  const dialect = options.dialect ?? "postgres";
  return {
    dialect,
    statements,
    async query<R>(sql: string, params: readonly unknown[] = []): Promise<SqlResult<R>> {
      if (!Array.isArray(params))
        throw new TypeError(`fakeTransaction: the parameters of "${excerpt(sql)}" are not an array`);
      const mismatch = placeholderMismatch(sql, dialect, params.length, true);
      if (mismatch !== undefined)
        throw new Error(
          `fakeTransaction: statement "${excerpt(sql)}" disagrees with its parameters: ${mismatch}`,
        );
      statements.push({ sql, params });
      const answer = (await options.respond?.(sql, params)) ?? {};
      const rows = (answer.rows ?? []) as R[];
      return { rows, rowCount: answer.rowCount ?? (answer.rows ? rows.length : 1) };
    },
  };
}

/**
 * The context the worker gives a handler, with plain defaults (a first attempt of message "test-message-1") that
 * `overrides` replace. For a two-phase handler, `idempotencyKey` is the MessageId, as the worker sets it.
 */
export function fakeContext(
  overrides: Partial<MessageContext> = {},
): MessageContext & { readonly idempotencyKey: string } {
  const context: MessageContext = {
    messageId: "test-message-1",
    attempt: 1,
    consumer: "test",
    type: "",
    deliveryCount: 0,
    enqueuedTime: new Date(),
    applicationProperties: {},
    ...overrides,
  };
  return { ...context, idempotencyKey: context.messageId };
}

/**
 * What a statements handler gives the worker for `body`, resolved to `dialect` (default "postgres") and checked as
 * the worker checks it (a text for the dialect, no transaction control, SQL Server's parameter limit, placeholders
 * that agree with the parameters): a unit test of the handler's statements, no database needed. Throws the
 * DoNotRetryError the worker would dead-letter with. On SQL Server it also refuses (with an Error) a parameter the
 * statement never refers to, which the server would accept (and the worker send) but which is a placeholder forgotten.
 */
export function fakeStatements<T>(
  handler: StatementsHandler<T>,
  body: T,
  options: { readonly dialect?: Dialect; readonly context?: Partial<MessageContext> } = {},
): BoundStatement[] {
  const dialect = options.dialect ?? "postgres";
  const bound = resolveStatements(handler, body, fakeContext(options.context), dialect);
  bound.forEach((statement, index) => {
    const mismatch = placeholderMismatch(statement.sql, dialect, statement.params.length, true);
    if (mismatch !== undefined)
      throw new Error(
        `fakeStatements: statements handler "${handler.type}": statement ${index + 1} (${excerpt(statement.sql)}): ${mismatch}`,
      );
  });
  return bound;
}

function excerpt(sql: string): string {
  const flat = sql.replace(/\s+/g, " ").trim();
  return flat.length > 120 ? `${flat.slice(0, 117)}...` : flat;
}
