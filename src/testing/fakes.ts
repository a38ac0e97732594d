import {
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
 * handler sends and answers as `respond` says. It checks no SQL; the harness (a real database) is where statements
 * are proven, so keep these tests to a handler's own decisions.
 */
export function fakeTransaction(options: FakeTransactionOptions = {}): FakeTransaction {
  const statements: RecordedStatement[] = [];
  return {
    dialect: options.dialect ?? "postgres",
    statements,
    async query<R>(sql: string, params: readonly unknown[] = []): Promise<SqlResult<R>> {
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
 * the worker checks it (a text for the dialect, no transaction control, SQL Server's parameter limit): a unit test
 * of the handler's statements, no database needed. Throws the DoNotRetryError the worker would dead-letter with.
 */
export function fakeStatements<T>(
  handler: StatementsHandler<T>,
  body: T,
  options: { readonly dialect?: Dialect; readonly context?: Partial<MessageContext> } = {},
): BoundStatement[] {
  return resolveStatements(handler, body, fakeContext(options.context), options.dialect ?? "postgres");
}
