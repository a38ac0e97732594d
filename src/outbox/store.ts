import type { Dialect, SqlResult } from "../domain/sql.ts";
import type { MigrationSet } from "../inbox/migrations.ts";
import type { MigrationResult } from "../inbox/store.ts";
import type { OutboxMessage } from "../servicebus/outbox-sender.ts";
import type { OutboxRowRecord, OutboxStatements } from "./statements.ts";

/** The connection plumbing the outbox borrows from the inbox's dialect drivers (pool, migrations runner). */
export interface OutboxDriver {
  readonly dialect: Dialect;
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
  migrate(set: MigrationSet): Promise<MigrationResult>;
  close(): Promise<void>;
}

export interface OutboxStatus {
  /** Age of the oldest unsent row, in milliseconds (0 when none). */
  readonly lagMs: number;
  readonly unsent: number;
  /** Unsent rows first tried longer ago than the duplicate-detection window: a resend might not be dropped. */
  readonly stale: number;
  readonly setAside: number;
}

/** Lists of ids travel as one parameter: an array on PostgreSQL, a JSON array on SQL Server. */
const idList: Record<Dialect, (ids: readonly string[]) => unknown> = {
  postgres: (ids) => ids,
  sqlserver: (ids) => JSON.stringify(ids.map(Number)),
};

/** The relay's side of the outbox, on any database, given that database's driver and statements. */
export class OutboxStore {
  readonly dialect: Dialect;
  private readonly driver: OutboxDriver;
  private readonly sql: OutboxStatements;
  private readonly migrations: MigrationSet;

  constructor(driver: OutboxDriver, statements: OutboxStatements, migrations: MigrationSet) {
    this.driver = driver;
    this.dialect = driver.dialect;
    this.sql = statements;
    this.migrations = migrations;
  }

  /** Applies pending outbox migrations (its own version table); safe when several instances run it at once. */
  migrate(): Promise<MigrationResult> {
    return this.driver.migrate(this.migrations);
  }

  /**
   * Claims up to `batchSize` unsent rows in Id order for `leaseMs`; rows first tried before the window are left, and
   * of a session key only its head (its earliest unsent row) is taken.
   */
  async claim(batchSize: number, leaseMs: number, windowMs: number): Promise<OutboxMessage[]> {
    const { rows } = await this.driver.query<OutboxRowRecord>(this.sql.claim, [batchSize, leaseMs, windowMs]);
    return rows
      .map((r) => ({
        id: String(r.id),
        messageId: r.messageId,
        type: r.type,
        body: r.body,
        properties: r.properties,
        correlationId: r.correlationId,
        traceParent: r.traceParent,
        traceState: r.traceState,
        sessionId: r.sessionId ?? null,
        firstTry:
          r.firstTry === undefined ? r.firstAttemptBefore === null : r.firstTry === true || r.firstTry === 1,
      }))
      .sort((a, b) => compareIds(a.id, b.id)); // UPDATE ... RETURNING / OUTPUT promise no order
  }

  async markSent(ids: readonly string[]): Promise<void> {
    if (ids.length > 0) await this.driver.query(this.sql.markSent, [idList[this.dialect](ids)]);
  }

  /** Frees rows after a failed send; `neverSent` (rows on their first try) forget that try (statements.ts). */
  async release(ids: readonly string[], delayMs: number, neverSent: readonly string[] = []): Promise<void> {
    if (ids.length > 0)
      await this.driver.query(this.sql.release, [
        idList[this.dialect](ids),
        delayMs,
        idList[this.dialect](neverSent),
      ]);
  }

  async setAside(id: string, error: string): Promise<void> {
    await this.driver.query(this.sql.setAside, [id, error.slice(0, 4000)]);
  }

  async status(windowMs: number): Promise<OutboxStatus> {
    const { rows } = await this.driver.query<Record<keyof OutboxStatus, number | string>>(this.sql.status, [
      windowMs,
    ]);
    const r = rows[0]!;
    return {
      lagMs: Number(r.lagMs),
      unsent: Number(r.unsent),
      stale: Number(r.stale),
      setAside: Number(r.setAside),
    };
  }

  /** Deletes sent rows older than `retentionMs`, in batches; returns how many. */
  async cleanup(retentionMs: number, batchSize = 500): Promise<number> {
    let total = 0;
    for (;;) {
      const { rowCount } = await this.driver.query(this.sql.cleanupBatch, [
        Math.floor(retentionMs / 1000),
        batchSize,
      ]);
      total += rowCount;
      if (rowCount < batchSize) return total;
    }
  }

  close(): Promise<void> {
    return this.driver.close();
  }
}

function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
