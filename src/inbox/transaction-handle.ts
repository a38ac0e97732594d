import type { Dialect, SqlExecutor, SqlResult } from "../domain/sql.ts";
import { SavepointInBatchError, TransactionControlError, UnawaitedStatementError } from "./errors.ts";
import { noteFailedStatement } from "./failed-statement.ts";
import { refusedStatement } from "./transaction-guard.ts";

/** What a handle sends its statements through: the inbox transaction (core.ts's InboxTransaction). */
export interface StatementRunner {
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
}

/**
 * The handler's only handle: bound to the transaction, and dead once the transaction ends. Its statements run
 * one at a time in the order given (mssql refuses a second request on a transaction while one runs, and its
 * refused rollback would leave the transaction open), and it knows which are still running.
 */
export class TransactionHandle {
  readonly executor: SqlExecutor;
  private open = true;
  /** The tail of the queue: settles when every statement given so far has finished. */
  private tail: Promise<unknown> = Promise.resolve();
  private readonly running = new Set<Promise<unknown>>();
  private readonly failures = new Map<Promise<unknown>, unknown>();
  private refused: TransactionControlError | SavepointInBatchError | undefined;
  /** The error of the first of the handler's statements that failed (the driver's own error object). */
  statementFailure: unknown;

  /**
   * `alongside`: the handler runs beside others on the transaction (a batch's keyed handler on a pipelining
   * connection), so its savepoints are refused too (transaction-guard.ts).
   */
  constructor(dialect: Dialect, tx: StatementRunner, alongside = false) {
    this.executor = {
      dialect,
      query: <R = Record<string, unknown>>(
        sql: string,
        params?: readonly unknown[],
      ): Promise<SqlResult<R>> => {
        if (!this.open)
          return Promise.reject(
            new Error("the inbox transaction has ended; this handle can no longer write"),
          );
        const refused = refusedStatement(sql, dialect);
        const savepoint =
          alongside && refused === undefined ? refusedStatement(sql, dialect, "alongside") : undefined;
        if (refused !== undefined || savepoint !== undefined) {
          this.refused ??=
            refused !== undefined
              ? new TransactionControlError(refused)
              : new SavepointInBatchError(savepoint!);
          return Promise.reject(this.refused);
        }
        const statement = this.tail.then(() => tx.query<R>(sql, params));
        this.tail = statement.catch(() => undefined);
        this.running.add(statement);
        statement.then(
          () => this.running.delete(statement),
          (error: unknown) => {
            noteFailedStatement(error, sql);
            this.running.delete(statement);
            this.failures.set(statement, error);
            this.statementFailure ??= error;
          },
        );
        return statement;
      },
    };
  }

  /**
   * Closes the handle and waits for every statement to finish. Returns why the transaction must not commit:
   * a refused statement, or a statement still running when the handler returned that then failed (the handler
   * cannot have seen that error).
   */
  async end(): Promise<unknown> {
    this.open = false;
    const unawaited = [...this.running];
    await this.tail;
    if (this.refused) return this.refused;
    for (const statement of unawaited) {
      if (this.failures.has(statement)) return new UnawaitedStatementError(this.failures.get(statement));
    }
    return undefined;
  }
}
