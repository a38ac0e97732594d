import { SpanKind, SpanStatusCode, trace, type Attributes, type Span } from "@opentelemetry/api";
import type { Dialect, SqlResult } from "../domain/sql.ts";
import type { InboxDriver, InboxStatements, InboxTransaction } from "../inbox/core.ts";
import type { InboxStore } from "../inbox/store.ts";
import { sqlServerErrorNumbers } from "../inbox/sqlserver/error-chain.ts";
import { Attr, DbSystem, errorType, SpanName, TRACER_NAME } from "./names.ts";
import { sampledOut } from "./recording.ts";

/**
 * Spans for the inbox: `traceInboxStore` gives the transaction (and the two-phase claim) a span carrying its
 * outcome; `traceInboxDriver` gives every statement inside it one, the marker insert and the handler's own
 * writes included. Both are no-ops until a tracer provider is registered.
 */
const tracer = () => trace.getTracer(TRACER_NAME);

/** The store with a span around `process`, `claim` and `markProcessed`, children of the active span. */
export function traceInboxStore<S extends InboxStore>(store: S): S {
  const system = DbSystem[store.dialect];
  // db.system.name is fixed by the store and goes in at creation, where a sampler can read it; the message's key
  // waits until the span is known to record, so a sampled-out message builds no attributes (docs/telemetry.md).
  const fixed: Attributes = Object.freeze({ [Attr.dbSystem]: system });
  const base = (span: Span, key: { messageId: string; consumer: string }): void => {
    if (!span.isRecording()) return;
    span.setAttribute(Attr.messageId, key.messageId);
    span.setAttribute(Attr.consumer, key.consumer);
  };
  const traced: Partial<InboxStore> = {
    process: (key, work, hint) =>
      inSpan(SpanName.inboxTransaction, fixed, async (span) => {
        base(span, key);
        const outcome = await store.process(key, work, hint);
        span.setAttribute(Attr.outcome, outcome.kind);
        if (outcome.kind === "failed") recordDbError(span, store.dialect, outcome.error);
        return outcome;
      }),
    claim: (key, reenter) =>
      inSpan(SpanName.inboxClaim, fixed, async (span) => {
        base(span, key);
        const outcome = await store.claim(key, reenter);
        span.setAttribute(Attr.outcome, outcome.kind);
        if (outcome.kind === "failed") recordDbError(span, store.dialect, outcome.error);
        return outcome;
      }),
    markProcessed: (key, claimId) =>
      inSpan(SpanName.inboxMarkProcessed, fixed, async (span) => {
        base(span, key);
        try {
          await store.markProcessed(key, claimId);
        } catch (error) {
          recordDbError(span, store.dialect, error);
          throw error;
        }
      }),
  };
  // A proxy rather than a copy: every other member (and any the adapter adds) reaches the store untouched.
  return new Proxy(store, {
    get(target, property, receiver) {
      if (typeof property === "string" && property in traced) return traced[property as keyof InboxStore];
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** The driver with a CLIENT span per statement: BEGIN, each query, COMMIT, ROLLBACK. */
export function traceInboxDriver<D extends InboxDriver>(driver: D): D {
  const roles = statementRoles(driver.statements);
  const batch = driver.batchStatements;
  // A batch statement's text depends on its size (SQL Server): its role is known by the shape at that size.
  const roleOf = (sql: string): string | undefined => {
    const role = roles.get(sql);
    if (role !== undefined || batch === undefined) return role;
    const rows = batch.arrays ? 1 : new Set(sql.match(/@p\d+/g) ?? []).size - 1;
    if (rows < 1 || rows > batch.maxRows) return undefined;
    if (sql === batch.insertMarkers(rows)) return "batchInsertMarkers";
    if (sql === batch.isProcessed(rows)) return "batchIsProcessed";
    return undefined;
  };
  // A statement's span name and attributes depend on its text alone: worked out once per text (the inbox's
  // statements and a handler's are a few fixed texts), not per statement sent.
  const described = new Map<string, { name: string; attributes: Attributes }>();
  let describedChars = 0;
  const describe = (sql: string): { name: string; attributes: Attributes } => {
    const known = described.get(sql);
    if (known !== undefined) return known;
    const operation = firstKeyword(sql);
    const role = roleOf(sql);
    // The inbox's own statements name their table; a ping or a cutoff query touches none.
    const table = role && /\bInbox\b/.test(sql) ? "Inbox" : undefined;
    const description = {
      name: SpanName.dbStatement(operation, table),
      attributes: Object.freeze({
        [Attr.dbSystem]: DbSystem[driver.dialect],
        [Attr.dbOperation]: operation,
        [Attr.dbQueryText]: sql,
        ...(table ? { [Attr.dbCollection]: table } : {}),
        ...(role ? { [Attr.inboxStatement]: role } : {}),
      }),
    };
    // Bounded by count and by characters, for a handler that builds its SQL text per message (it should not:
    // parameters, not literals); a long text (a multi-row INSERT with literals) is described anew each time.
    if (
      sql.length <= DESCRIBED_TEXT_MAX &&
      described.size < DESCRIBED_TEXTS &&
      describedChars + sql.length <= DESCRIBED_CHARS
    ) {
      described.set(sql, description);
      describedChars += sql.length;
    }
    return description;
  };
  const statement = <T>(sql: string, run: () => Promise<T>): Promise<T> => {
    const { name, attributes } = describe(sql);
    return inLeafSpan(name, attributes, run, driver.dialect);
  };
  const controls = new Map(
    ["BEGIN", "COMMIT", "ROLLBACK"].map((operation) => [
      operation,
      Object.freeze({ [Attr.dbSystem]: DbSystem[driver.dialect], [Attr.dbOperation]: operation }),
    ]),
  );
  const control = <T>(operation: "BEGIN" | "COMMIT" | "ROLLBACK", run: () => Promise<T>): Promise<T> =>
    inLeafSpan(operation, controls.get(operation)!, run, driver.dialect);
  const traceTx = (tx: InboxTransaction): InboxTransaction => ({
    query: <R>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> =>
      statement(sql, () => tx.query<R>(sql, params)),
    commit: () => control("COMMIT", () => tx.commit()),
    rollback: () => control("ROLLBACK", () => tx.rollback()),
  });
  const traced: Partial<InboxDriver> = {
    query: <R>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>> =>
      statement(sql, () => driver.query<R>(sql, params)),
    begin: async () => traceTx(await control("BEGIN", () => driver.begin())),
    // The statements run under a session lock (the cleanup's) get their spans as any other.
    whileHolding: (name, work) =>
      driver.whileHolding(name, (db) =>
        work({
          query: <R>(sql: string, params?: readonly unknown[]) =>
            statement(sql, () => db.query<R>(sql, params)),
        }),
      ),
  };
  return new Proxy(driver, {
    get(target, property, receiver) {
      if (typeof property === "string" && property in traced) return traced[property as keyof InboxDriver];
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/**
 * `db.response.status_code` as the conventions define it: the PostgreSQL SQLSTATE, or the SQL Server error
 * number. Undefined for errors that never reached the server (a refused connection).
 */
export function dbStatusCode(dialect: Dialect, error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  if (dialect === "sqlserver") {
    const number = sqlServerErrorNumbers(error)[0];
    return number === undefined ? undefined : String(number);
  }
  // Only the server's errors (pg's DatabaseError carries a severity): a socket's EPIPE also has five capitals.
  const { code, severity } = error as { code?: unknown; severity?: unknown };
  return typeof severity === "string" && typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)
    ? code
    : undefined;
}

function recordDbError(span: Span, dialect: Dialect, error: unknown): void {
  const status = dbStatusCode(dialect, error);
  if (status !== undefined) span.setAttribute(Attr.dbStatusCode, status);
  span.setAttribute(Attr.errorType, status ?? errorType(error));
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : undefined });
}

/**
 * How many distinct statement texts a driver keeps the span description of, the longest text it keeps and the
 * characters it keeps in all (each description holds its text once more as `db.query.text`): at most about 1 MB.
 */
const DESCRIBED_TEXTS = 512;
const DESCRIBED_TEXT_MAX = 4096;
const DESCRIBED_CHARS = 256 * 1024;

/**
 * An active INTERNAL span around `run` (its children nest under it); ended however `run` ends. It starts with the
 * fixed `attributes`; `run` adds the per-message ones once the span is known to record. Under a sampled-out
 * message's span it starts none: `run` gets that span (whose calls record nothing) and runs in the message's own
 * context, so a handler's spans and log lines still carry the message's trace.
 */
async function inSpan<T>(name: string, attributes: Attributes, run: (span: Span) => Promise<T>): Promise<T> {
  const active = trace.getActiveSpan();
  if (active !== undefined && !active.isRecording()) return run(active);
  return tracer().startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await run(span);
    } catch (error) {
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw error;
    } finally {
      span.end();
    }
  });
}

/**
 * A CLIENT span around one statement: a leaf (nothing runs inside it that takes a span), so it is started as a
 * child of the active span without becoming active itself, which spares a context switch per statement. None
 * under a sampled-out message's span.
 */
async function inLeafSpan<T>(
  name: string,
  attributes: Attributes,
  run: () => Promise<T>,
  dialect: Dialect,
): Promise<T> {
  if (sampledOut()) return run();
  const span = tracer().startSpan(name, { kind: SpanKind.CLIENT, attributes });
  try {
    return await run();
  } catch (error) {
    if (span.isRecording()) recordDbError(span, dialect, error);
    throw error;
  } finally {
    span.end();
  }
}

function statementRoles(statements: InboxStatements): Map<string, string> {
  return new Map(Object.entries(statements).map(([role, sql]) => [sql as string, role]));
}

function firstKeyword(sql: string): string {
  return /^\s*([A-Za-z]+)/.exec(sql)?.[1]?.toUpperCase() ?? "QUERY";
}
