import { fileURLToPath } from "node:url";
import pg from "pg";
import type { ErrorClass } from "../../domain/outcome.ts";
import type { SqlResult } from "../../domain/sql.ts";
import type { InboxDriver, InboxStoreOptions, InboxTransaction, StatementOrigin } from "../core.ts";
import type { Held, SessionQueries } from "../driver.ts";
import { InboxCore } from "../core.ts";
import { traceInboxDriver, traceInboxStore } from "../../telemetry/inbox-tracing.ts";
import {
  applying,
  loadMigrations,
  modulePrefix,
  pendingMigrationNames,
  type MigrationSet,
} from "../migrations.ts";
import type { MigrationResult, ModuleMigrations } from "../store.ts";
import type { DatabaseTimeouts } from "../timeouts.ts";
import { classifyPostgresError } from "./classify.ts";
import { postgresPoolConfig } from "./pool.ts";
import {
  ACQUIRE_MIGRATION_LOCK,
  BEGIN,
  COMMIT,
  MIGRATION_LOCK_KEY,
  postgresSql,
  RELEASE_SESSION_LOCK,
  ROLLBACK,
  SCHEMA_EXISTS,
  TRY_SESSION_LOCK,
} from "./statements.ts";
import { DEFAULT_INBOX_SCHEMA, sessionLockName } from "../schema-name.ts";
import { driverErrorInChain } from "../error-links.ts";
import { statementExcerpt } from "../failed-statement.ts";

/** COMMIT answered ROLLBACK: the transaction had been aborted by an error the handler caught. */
export class AbortedTransactionError extends Error {
  constructor(command: string) {
    super(
      `COMMIT answered ${command}: an earlier statement failed and aborted the transaction; nothing was written`,
    );
    this.name = "AbortedTransactionError";
  }
}

export const POSTGRES_MIGRATIONS_DIR = fileURLToPath(new URL("./migrations/", import.meta.url));

const inboxDefaultSql = postgresSql();

export const POSTGRES_INBOX_MIGRATIONS: MigrationSet = {
  dir: POSTGRES_MIGRATIONS_DIR,
  lockKey: MIGRATION_LOCK_KEY,
  acquireLock: ACQUIRE_MIGRATION_LOCK,
  createVersionTable: inboxDefaultSql.CREATE_VERSION_TABLE,
  selectAppliedVersions: inboxDefaultSql.SELECT_APPLIED_VERSIONS,
  recordVersion: inboxDefaultSql.RECORD_VERSION,
};

export interface PostgresInboxOptions extends InboxStoreOptions {
  /** A ready pool (then the store does not end it on close) or a connection URL. */
  readonly pool?: pg.Pool;
  readonly url?: string;
  readonly maxConnections?: number;
  /** The schema of the inbox's tables (default public); migrate creates it when missing. */
  readonly schema?: string;
  /** Bounds on every database wait, for a pool built from `url` (a given pool brings its own). */
  readonly timeouts?: DatabaseTimeouts;
  /** Idle pooled connections that fail (the server restarted) are reported here and replaced on next use. */
  readonly onIdleError?: (error: Error) => void;
}

export function createPostgresInboxStore(options: PostgresInboxOptions): InboxCore {
  // Traced: a span for the transaction and one per statement (no-ops until telemetry is started).
  return traceInboxStore(new InboxCore(traceInboxDriver(new PostgresDriver(options)), options));
}

/** The inbox on PostgreSQL through `pg`. */
/** SQLSTATE deadlock_detected: this transaction was the deadlock's victim. */
const DEADLOCK_DETECTED = "40P01";

interface CheckedOut {
  readonly client: pg.PoolClient;
  /** The first connection error the client emitted while checked out. */
  readonly lost: () => Error | undefined;
  /** Back to the pool, or destroyed when given a reason or when the connection was lost. */
  readonly release: (reason?: Error | boolean) => void;
}

export class PostgresDriver implements InboxDriver {
  readonly dialect = "postgres" as const;
  readonly statements: ReturnType<typeof postgresSql>["statements"];
  readonly batchStatements: ReturnType<typeof postgresSql>["batchStatements"];
  readonly legacy: ReturnType<typeof postgresSql>["legacy"];
  /** A pipelining pool (the one this driver builds) sends a statement while others are in flight. */
  readonly concurrentStatements: boolean;
  private readonly sql: ReturnType<typeof postgresSql>;
  private readonly schema: string;
  private readonly pool: pg.Pool;
  private readonly ownsPool: boolean;
  /** Errors raised by `pg` itself, as opposed to handler code: see classifyPostgresError. */
  private readonly driverErrors = new WeakSet<object>();

  constructor(options: PostgresInboxOptions) {
    this.schema = options.schema ?? DEFAULT_INBOX_SCHEMA.postgres;
    this.sql = postgresSql(this.schema);
    this.statements = this.sql.statements;
    this.batchStatements = this.sql.batchStatements;
    this.legacy = this.sql.legacy;
    if (options.pool) {
      this.pool = options.pool;
      this.ownsPool = false;
    } else {
      if (!options.url) throw new Error("PostgreSQL inbox: give a pool or a url");
      this.pool = new pg.Pool(
        postgresPoolConfig(options.url, options.maxConnections ?? 10, options.timeouts),
      );
      this.ownsPool = true;
    }
    this.concurrentStatements = (this.pool.options as { pipeline?: unknown }).pipeline === true;
    // Without a listener an idle client's error (server restart) would crash the process; pg drops that client.
    const onIdleError = options.onIdleError ?? (() => undefined);
    this.pool.on("error", onIdleError);
  }

  async query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> {
    const values = sendable(sql, params);
    try {
      const result = await this.pool.query(sql, values);
      return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
    } catch (error) {
      throw this.tag(error);
    }
  }

  async whileHolding<T>(name: string, work: (db: SessionQueries) => Promise<T>): Promise<Held<T>> {
    const lock = sessionLockName(this.schema, name);
    const out = await this.checkOut();
    const client = out.client;
    const run = async <R>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> => {
      try {
        const result = await client.query(sql, sendable(sql, params));
        return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
      } catch (error) {
        throw this.tag(error);
      }
    };
    let unlocked = false;
    try {
      const got = await run<{ held: boolean }>(TRY_SESSION_LOCK, [lock]);
      if (got.rows[0]?.held !== true) {
        unlocked = true;
        return { held: false };
      }
      try {
        return { held: true, value: await work({ query: run }) };
      } finally {
        unlocked = await run(RELEASE_SESSION_LOCK, [lock]).then(
          () => true,
          () => false,
        );
      }
    } finally {
      // A lock not given back goes with its connection: the client is destroyed instead of pooled.
      out.release(unlocked ? undefined : true);
    }
  }

  /**
   * A client out of the pool, listening for its connection's error: while checked out, a client's connection error
   * is emitted on the client, not the pool, and without a listener it would crash the process. The query in flight
   * fails with it too, and that is what the caller sees; `lost()` keeps the first (the server's reason, 25P03 or
   * 57P01 sent before it closes; "Connection terminated" follows). `release` destroys a lost client.
   */
  private async checkOut(): Promise<CheckedOut> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      throw this.tag(error);
    }
    let lost: Error | undefined;
    const onError = (error: Error): void => {
      lost ??= error;
    };
    client.on("error", onError);
    return {
      client,
      lost: () => lost,
      release: (reason) => {
        client.removeListener("error", onError);
        client.release(lost ?? reason);
      },
    };
  }

  async begin(): Promise<InboxTransaction> {
    const out = await this.checkOut();
    const client = out.client;
    const lostError = out.lost;
    let done = false;
    const finish = (broken?: unknown, destroy = false): void => {
      if (done) return;
      done = true;
      // A client whose connection failed is destroyed instead of returned to the pool; a server-side error
      // (DatabaseError) leaves the connection fine.
      const healthy = !destroy && (broken === undefined || broken instanceof pg.DatabaseError);
      out.release(healthy ? undefined : broken instanceof Error ? broken : true);
    };
    // BEGIN is not sent here: it goes out with the transaction's first statement, in one write when the client
    // pipelines (the pool this driver builds does), so a transaction costs no round trip of its own to open.
    // `opening` is that first statement (undefined until one is given): later ones go behind it, in order.
    let opening: Promise<unknown> | undefined;
    // A statement that failed on the client's side (pg's query_timeout, a lost connection) leaves the connection
    // unusable: pg's query_timeout only rejects the caller and keeps the query active on the connection, so
    // anything sent after it (the next statement, ROLLBACK) queues behind a server that may never answer.
    let broken: Error | undefined;
    // Without pipelining, COMMIT or ROLLBACK given while BEGIN is out would overtake the first statement.
    const waitForOpening = async (): Promise<void> => {
      if (opening !== undefined && !client.pipeline) await opening;
    };
    // Without pipelining pg queues a statement given while another runs only with a deprecation warning (pg 8;
    // pg 9 drops it): the transaction sends its statements one after another itself.
    // A statement that failed the connection (pg's query_timeout, which leaves the connection busy with the late
    // statement; a lost connection) stops those given behind it: they must not run after it, nor wait a bound each.
    let last: Promise<unknown> = Promise.resolve();
    const inOrder = <T>(send: () => Promise<T>): Promise<T> => {
      if (client.pipeline) return send();
      const run = (): Promise<T> => {
        const failed = broken ?? lostError();
        return failed !== undefined ? Promise.reject(failed) : send();
      };
      const next = last.then(run, run);
      last = next.catch(() => undefined);
      return next;
    };
    return {
      query: async <R>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> => {
        if (broken !== undefined) throw broken;
        // Refused before anything is sent: the connection and the transaction stay as they were.
        const values = sendable(sql, params);
        try {
          let result: pg.QueryResult;
          if (opening === undefined) {
            const first = inOrder(() =>
              withBegin(client, sql, values, (error) => {
                // Statements given after this one must not run without the transaction.
                const reason = lostError() ?? error;
                broken ??= reason instanceof Error ? reason : new Error(String(reason));
              }),
            );
            opening = first.catch(() => undefined);
            result = await first;
          } else {
            // Without pipelining it goes behind the first (which waits for BEGIN) and fails if that one failed the
            // connection (inOrder).
            result = await inOrder(() => client.query(sql, values));
          }
          return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
        } catch (error) {
          // The server's own reason (idle_in_transaction_session_timeout, a shutdown) beats pg's "not queryable".
          const reason = this.tag(lostError() ?? error);
          if ((lostError() !== undefined || !(error instanceof pg.DatabaseError)) && reason instanceof Error)
            broken ??= reason;
          throw reason;
        }
      },
      commit: async () => {
        // Nothing was sent, so there is nothing to commit.
        if (opening === undefined) return finish();
        await waitForOpening();
        if (broken !== undefined) {
          finish(broken, true);
          throw broken;
        }
        let result: pg.QueryResult;
        try {
          result = await inOrder(() => client.query(COMMIT));
        } catch (error) {
          finish(error);
          throw this.tag(lostError() ?? error);
        }
        finish();
        // COMMIT of a transaction that an earlier statement aborted (a handler caught that error and went on)
        // succeeds as a ROLLBACK: nothing was written, so this must not be reported as committed.
        if (result.command !== "COMMIT") throw new AbortedTransactionError(result.command);
      },
      rollback: async () => {
        if (done) return;
        if (opening === undefined) return finish();
        await waitForOpening();
        if (broken !== undefined || lostError() !== undefined) {
          // No ROLLBACK on a connection that cannot answer: it would wait out a second query_timeout. Closing
          // the connection ends the transaction; the server rolls it back when it sees the close.
          finish(broken ?? lostError(), true);
          return;
        }
        try {
          await inOrder(() => client.query(ROLLBACK));
          finish();
        } catch (error) {
          // Whatever the reason, a connection whose rollback failed may still hold the transaction and its locks
          // (the marker's key lock blocks every redelivery): it is closed, never returned to the pool.
          finish(error, true);
        }
      },
    };
  }

  isDeadlock(error: unknown): boolean {
    return (
      driverErrorInChain(error, (e) => e instanceof pg.DatabaseError && e.code === DEADLOCK_DETECTED) !==
      undefined
    );
  }

  classify(error: unknown, origin: StatementOrigin): ErrorClass {
    // The store's own error, even wrapped by a handler, is classed as the driver's; anything else as the handler's.
    const own = driverErrorInChain(error, (e) => this.driverErrors.has(e));
    return own === undefined
      ? classifyPostgresError(error, origin, false)
      : classifyPostgresError(own, origin, true);
  }

  /**
   * Applies pending migrations: given a migration set (the outbox's), that set; otherwise the inbox's in this store's
   * schema, then those of the handler module, if one is given.
   */
  async migrate(what?: ModuleMigrations | MigrationSet): Promise<MigrationResult> {
    const given = what !== undefined && "dir" in what ? what : undefined;
    const module = what !== undefined && !("dir" in what) ? what : undefined;
    const inbox = given === undefined;
    const set: MigrationSet = given ?? {
      ...POSTGRES_INBOX_MIGRATIONS,
      createVersionTable: this.sql.CREATE_VERSION_TABLE,
      selectAppliedVersions: this.sql.SELECT_APPLIED_VERSIONS,
      recordVersion: this.sql.RECORD_VERSION,
    };
    const migrations = await loadMigrations(set.dir);
    const tx = await this.begin();
    try {
      // Serializes concurrent migrate runs; released by the commit or rollback.
      await tx.query(set.acquireLock, [set.lockKey]);
      if (inbox) {
        if ((await tx.query(SCHEMA_EXISTS, [this.schema])).rowCount === 0)
          await tx.query(this.sql.CREATE_SCHEMA);
        await tx.query(this.sql.SET_MIGRATION_SEARCH_PATH);
      }
      await tx.query(set.createVersionTable);
      const applied = new Set(
        (await tx.query<{ version: number }>(set.selectAppliedVersions)).rows.map((r) => r.version),
      );
      const names: string[] = [];
      for (const migration of migrations) {
        if (applied.has(migration.version)) continue;
        // no parameters: the simple protocol runs every statement in the file
        await applying(migration, inbox ? "the inbox's" : "the outbox's", () => tx.query(migration.sql));
        await tx.query(set.recordVersion, [migration.version, migration.name]);
        names.push(migration.name);
      }
      if (module) {
        await tx.query(this.sql.CREATE_MODULE_VERSION_TABLE);
        const done = new Set(
          (await tx.query<{ version: number }>(this.sql.SELECT_MODULE_VERSIONS, [module.module])).rows.map(
            (r) => r.version,
          ),
        );
        await tx.query(this.sql.RESET_MIGRATION_SEARCH_PATH);
        for (const migration of module.migrations) {
          if (done.has(migration.version)) continue;
          await applying(migration, `module "${module.module}"'s`, () => tx.query(migration.sql));
          await tx.query(this.sql.RECORD_MODULE_VERSION, [module.module, migration.version, migration.name]);
          names.push(`${modulePrefix(module.module)}${migration.name}`);
        }
      }
      await tx.commit();
      return { applied: names };
    } catch (error) {
      await tx.rollback();
      throw error;
    }
  }

  pendingMigrations(module?: ModuleMigrations): Promise<string[]> {
    return pendingMigrationNames(
      { query: (t, p) => this.query(t, p), versionSql: this.sql },
      POSTGRES_MIGRATIONS_DIR,
      module,
    );
  }

  async close(): Promise<void> {
    if (this.ownsPool) await this.pool.end();
  }

  private tag(error: unknown): unknown {
    if (typeof error === "object" && error !== null) this.driverErrors.add(error);
    return error;
  }
}

/** pg's own conversion of a parameter to its text (`utils.prepareValue`, which @types/pg does not declare). */
const pgUtils = (pg as unknown as { utils: { prepareValue: (value: unknown) => unknown } }).utils;

/**
 * A statement's parameters as pg sends them, converted here so that what cannot be sent fails as the caller's
 * mistake before the driver sees it: a text that is not a string, parameters that are not an array, a value pg
 * cannot convert (an object that refers to itself through `toPostgres`, a `toPostgres` or `toJSON` that throws).
 * pg raises those as plain Errors without a code from inside the query, which the classifier can only take for a
 * lost connection (an outage that would pause the worker); thrown here, they are TypeErrors of the handler's
 * (`permanent`). The values pg is then given are the converted ones, which it passes on unchanged.
 */
function sendable(sql: unknown, params: readonly unknown[] | undefined): unknown[] | undefined {
  if (typeof sql !== "string")
    throw new TypeError(`a statement's text must be a string, not ${sql === null ? "null" : typeof sql}`);
  if (params === undefined || params === null) return undefined;
  if (!Array.isArray(params))
    throw new TypeError(
      `the parameters of "${statementExcerpt(sql, 80)}" must be an array, not ${typeof params}`,
    );
  return params.map((value, index) => {
    try {
      return pgUtils.prepareValue(value);
    } catch (error) {
      throw new TypeError(
        `parameter $${index + 1} of "${statementExcerpt(sql, 80)}" cannot be sent to PostgreSQL: ${(error as Error)?.message ?? String(error)}`,
        { cause: error },
      );
    }
  });
}

/**
 * BEGIN, then a transaction's first statement. On a pipelining client both go out at once and the server runs
 * them in order: one round trip instead of two. A bare BEGIN is refused only with its connection (then the
 * statement fails too); no refusal that leaves the connection running the statement on its own is known. The
 * caller gets BEGIN's error first either way.
 */
async function withBegin(
  client: pg.PoolClient,
  sql: string,
  params: unknown[] | undefined,
  onBeginFailed: (error: unknown) => void,
): Promise<pg.QueryResult> {
  if (!client.pipeline) {
    try {
      await client.query(BEGIN);
    } catch (error) {
      onBeginFailed(error);
      throw error;
    }
    return client.query(sql, params);
  }
  const [begin, statement] = await Promise.allSettled([client.query(BEGIN), client.query(sql, params)]);
  if (begin.status === "rejected") {
    onBeginFailed(begin.reason);
    throw begin.reason;
  }
  if (statement.status === "rejected") throw statement.reason;
  return statement.value;
}
