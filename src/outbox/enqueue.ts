import { context } from "@opentelemetry/api";
import type { SqlExecutor } from "../domain/sql.ts";
import { deriveMessageId } from "../servicebus/message-id.ts";
import { endSpan, startCreateSpan, traceparentOf, tracestateOf } from "../servicebus/tracing.ts";
import { INSERT_ROWS_WITHOUT_SESSION, statements as postgresStatements } from "./postgres/statements.ts";
import { insertRowsSql, SQLSERVER_INSERT_MAX_ROWS } from "./sqlserver/statements.ts";

/** One event for the outbox: its type (the message's subject), its business key, a JSON-serialisable body. */
export interface OutboxEvent {
  readonly type: string;
  readonly key: string;
  readonly body: unknown;
  /** Extra application properties; `traceparent` and `Diagnostic-Id` are set by the relay. */
  readonly properties?: Readonly<Record<string, string | number | boolean>>;
  readonly correlationId?: string;
  /**
   * The session key (e.g. the aggregate's id) for a session-enabled entity: sent as `sessionId` and as the partition
   * key, and the relay sends a key's events one after the other in commit order (docs/outbox.md, Sessions).
   */
  readonly sessionId?: string;
}

export interface EnqueueOptions {
  /**
   * PostgreSQL: also `pg_notify` the relay so it sends at commit instead of at its next poll (default true).
   * The notify takes a database-wide lock while the transaction commits (PreCommit_Notify), which serialises
   * the commits of every transaction that notified; turn it off for high commit rates and rely on the poll.
   */
  readonly notify?: boolean;
}

/**
 * SQL Server rows per INSERT statement: the parameter limit (2,100, 9 a row) allows 233, which also stays far under
 * lock escalation (about 5,000 row locks of one statement become a table lock, which would keep every relay's claim
 * waiting until the caller commits).
 */
export const SQLSERVER_INSERT_CHUNK = SQLSERVER_INSERT_MAX_ROWS;

export interface EnqueueResult {
  readonly messageId: string;
}

/** What `enqueue` writes through: the caller's own open transaction. */
export type OutboxTransaction = PgTransactionClient | MssqlTransaction | SqlExecutor;

/** A `pg` client (or pool client) on which the caller has run BEGIN. */
export interface PgTransactionClient {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
  getTransactionStatus?(): string | null;
}

/** An `mssql` Transaction the caller has begun. */
export interface MssqlTransaction {
  request(): {
    input(name: string, value: unknown): unknown;
    query(command: string): Promise<{ recordset?: unknown[] }>;
  };
}

const RESERVED_PROPERTIES = new Set(["traceparent", "tracestate", "diagnostic-id"]);

interface Row {
  readonly messageId: string;
  readonly type: string;
  readonly key: string;
  readonly body: string;
  readonly properties: string | null;
  readonly correlationId: string | null;
  readonly traceParent: string | null;
  readonly traceState: string | null;
  readonly sessionId: string | null;
}

/**
 * Writes the events into the outbox through the caller's open transaction, so they commit with the caller's
 * business change or not at all. Nothing is sent here: the relay sends after the commit. Enqueue after the
 * business writes, so that two transactions touching the same rows get outbox Ids in their commit order.
 * The MessageId of each event is derived as the publisher derives it.
 */
export async function enqueue(
  tx: OutboxTransaction,
  events: OutboxEvent | readonly OutboxEvent[],
  options: EnqueueOptions = {},
): Promise<EnqueueResult[]> {
  const list: readonly OutboxEvent[] = Array.isArray(events) ? events : [events as OutboxEvent];
  const rows = list.map(toRow);
  if (rows.length === 0) return [];
  const { span, ctx } = startCreateSpan(rows.length, rows.length === 1 ? rows[0]!.messageId : undefined);
  const traceParent = traceparentOf(ctx) ?? null;
  const traceState = traceParent === null ? null : (tracestateOf(ctx) ?? null);
  const stamped = rows.map((r) => ({ ...r, traceParent, traceState }));
  try {
    await context.with(ctx, () => insert(tx, stamped, options.notify ?? true));
    endSpan(span);
  } catch (error) {
    endSpan(span, error);
    throw error;
  }
  return rows.map((r) => ({ messageId: r.messageId }));
}

function toRow(event: OutboxEvent, index: number): Row {
  const where = `outbox event ${index} (${String(event?.type)}:${String(event?.key)})`;
  if (typeof event !== "object" || event === null)
    throw new TypeError(`outbox event ${index} is not an object`);
  if (typeof event.type !== "string") throw new TypeError(`${where}: type must be a string`);
  if (typeof event.key !== "string") throw new TypeError(`${where}: key must be a string`);
  if (event.type.length > 200) throw new TypeError(`${where}: type is longer than 200 characters`);
  if (event.key.length > 400) throw new TypeError(`${where}: key is longer than 400 characters`);
  const messageId = deriveMessageId(event.type, event.key); // refuses an empty type or key, or ":" in the type
  const body = JSON.stringify(event.body);
  if (body === undefined) throw new TypeError(`${where}: body is not JSON-serialisable`);
  let properties: string | null = null;
  if (event.properties !== undefined) {
    for (const [name, value] of Object.entries(event.properties)) {
      if (RESERVED_PROPERTIES.has(name.toLowerCase()))
        throw new TypeError(`${where}: property "${name}" is set by the relay`);
      if (!["string", "number", "boolean"].includes(typeof value))
        throw new TypeError(`${where}: property "${name}" must be a string, number or boolean`);
    }
    properties = JSON.stringify(event.properties);
  }
  if (event.correlationId !== undefined && typeof event.correlationId !== "string")
    throw new TypeError(`${where}: correlationId must be a string`);
  if (
    event.sessionId !== undefined &&
    (typeof event.sessionId !== "string" || event.sessionId === "" || event.sessionId.length > 128)
  )
    throw new TypeError(`${where}: sessionId must be a string of 1 to 128 characters (Service Bus's limit)`);
  return {
    messageId,
    type: event.type,
    key: event.key,
    body,
    properties,
    correlationId: event.correlationId ?? null,
    traceParent: null,
    traceState: null,
    sessionId: event.sessionId ?? null,
  };
}

function chunks(rows: readonly Row[]): Row[][] {
  const out: Row[][] = [];
  for (let i = 0; i < rows.length; i += SQLSERVER_INSERT_CHUNK)
    out.push(rows.slice(i, i + SQLSERVER_INSERT_CHUNK));
  return out;
}

/**
 * The SessionId column is written only when an event of the call has a key: an application upgraded before its
 * database was migrated to 0002 still enqueues events without one, and one with a key gets an error that names
 * the migration instead of the database's "column does not exist".
 */
async function insert(tx: OutboxTransaction, rows: readonly Row[], notify: boolean): Promise<void> {
  const withSession = rows.some((r) => r.sessionId !== null);
  try {
    await insertRows(tx, rows, notify, withSession);
  } catch (error) {
    if (withSession && isMissingSessionColumn(error))
      throw new Error(
        "enqueue: an event has a sessionId, but the Outbox table has no SessionId column: run the outbox migration 0002_outbox_session first (sbinbox migrate --outbox, or the relay's start, docs/outbox.md, Upgrading)",
        { cause: error },
      );
    throw error;
  }
}

/** PostgreSQL 42703 (undefined_column), SQL Server 207 (invalid column name), on the SessionId column. */
function isMissingSessionColumn(error: unknown): boolean {
  const e = error as { code?: unknown; number?: unknown; message?: unknown } | null;
  if (typeof e?.message !== "string" || !/SessionId/i.test(e.message)) return false;
  return e.code === "42703" || e.number === 207 || /Invalid column name/i.test(e.message);
}

async function insertRows(
  tx: OutboxTransaction,
  rows: readonly Row[],
  notify: boolean,
  withSession: boolean,
): Promise<void> {
  const pgInsert = withSession ? postgresStatements.insertRows : INSERT_ROWS_WITHOUT_SESSION;
  if (isExecutor(tx)) {
    if (tx.dialect === "postgres") {
      await tx.query(pgInsert, postgresParams(rows, withSession));
      if (notify) await tx.query(postgresStatements.notify);
    } else {
      // One statement after the other, in order: identity values still follow the caller's order.
      for (const chunk of chunks(rows))
        await tx.query(insertRowsSql(chunk.length, withSession), sqlServerParams(chunk, withSession));
    }
    return;
  }
  if (isMssqlTransaction(tx)) {
    // mssql's own check: a Transaction that was never begun (or has ended) has no connection.
    if (!(tx as unknown as { _acquiredConnection?: unknown })._acquiredConnection)
      throw new TypeError("enqueue: the mssql Transaction is not open (call begin() first)");
    for (const chunk of chunks(rows)) {
      const request = tx.request();
      sqlServerParams(chunk, withSession).forEach((value, i) => request.input(`p${i + 1}`, value));
      await request.query(insertRowsSql(chunk.length, withSession));
    }
    return;
  }
  if (typeof tx?.query !== "function")
    throw new TypeError("enqueue: give a pg client inside BEGIN, an mssql Transaction, or a handler's tx");
  const client = tx;
  if ("totalCount" in client)
    throw new TypeError("enqueue: give a client checked out of the pg Pool and inside BEGIN, not the Pool");
  const status = client.getTransactionStatus?.();
  if (status === "I" || status === null)
    throw new TypeError("enqueue: the pg client is not inside a transaction (run BEGIN first)");
  if (status === "E") throw new TypeError("enqueue: the pg client's transaction has failed; roll it back");
  await client.query(pgInsert, postgresParams(rows, withSession));
  if (notify) await client.query(postgresStatements.notify);
}

function postgresParams(rows: readonly Row[], withSession: boolean): unknown[] {
  const params = [
    rows.map((r) => r.messageId),
    rows.map((r) => r.type),
    rows.map((r) => r.key),
    rows.map((r) => r.body),
    rows.map((r) => r.properties),
    rows.map((r) => r.correlationId),
    rows.map((r) => r.traceParent),
    rows.map((r) => r.traceState),
  ];
  if (withSession) params.push(rows.map((r) => r.sessionId));
  return params;
}

/** The rows' values in insertRowsSql's order (its 9 columns, or 8 without SessionId), row after row. */
function sqlServerParams(rows: readonly Row[], withSession: boolean): unknown[] {
  return rows.flatMap((r) => [
    r.messageId,
    r.type,
    r.key,
    r.body,
    r.properties,
    r.correlationId,
    r.traceParent,
    r.traceState,
    ...(withSession ? [r.sessionId] : []),
  ]);
}

function isExecutor(tx: OutboxTransaction): tx is SqlExecutor {
  const d = (tx as SqlExecutor)?.dialect;
  return d === "postgres" || d === "sqlserver";
}

function isMssqlTransaction(tx: OutboxTransaction): tx is MssqlTransaction {
  return typeof (tx as MssqlTransaction)?.request === "function";
}
