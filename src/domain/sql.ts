/** The SQL dialects the inbox supports. Statements that differ between them are kept as data keyed by this. */
export type Dialect = "postgres" | "sqlserver";

export interface SqlResult<R> {
  readonly rows: R[];
  readonly rowCount: number;
}

/**
 * A handle bound to one open transaction. Parameters are positional: `$1, $2` on PostgreSQL,
 * `@p1, @p2` on SQL Server. It is the only thing a handler is given to write with.
 */
export interface SqlExecutor {
  readonly dialect: Dialect;
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
}

/** One statement per dialect, so handlers stay dialect-neutral without `if`s. */
export type DialectSql = Readonly<Record<Dialect, string>>;
