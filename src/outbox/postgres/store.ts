import { fileURLToPath } from "node:url";
import pg from "pg";
import { PostgresDriver } from "../../inbox/postgres/adapter.ts";
import type { MigrationSet } from "../../inbox/migrations.ts";
import { OutboxStore } from "../store.ts";
import {
  ACQUIRE_MIGRATION_LOCK,
  CREATE_VERSION_TABLE,
  LISTEN,
  MIGRATION_LOCK_KEY,
  RECORD_VERSION,
  SELECT_APPLIED_VERSIONS,
  statements,
} from "./statements.ts";

export const POSTGRES_OUTBOX_MIGRATIONS: MigrationSet = {
  dir: fileURLToPath(new URL("./migrations/", import.meta.url)),
  lockKey: MIGRATION_LOCK_KEY,
  acquireLock: ACQUIRE_MIGRATION_LOCK,
  createVersionTable: CREATE_VERSION_TABLE,
  selectAppliedVersions: SELECT_APPLIED_VERSIONS,
  recordVersion: RECORD_VERSION,
};

export interface PostgresOutboxOptions {
  /** A ready pool (then the store does not end it on close) or a connection URL. */
  readonly pool?: pg.Pool;
  readonly url?: string;
  readonly maxConnections?: number;
}

/** The outbox on PostgreSQL, on the inbox's driver (same pool handling, same migrations runner). */
export class PostgresOutboxStore extends OutboxStore {
  private readonly pool: pg.Pool;

  constructor(options: PostgresOutboxOptions) {
    const pool =
      options.pool ?? new pg.Pool({ connectionString: options.url, max: options.maxConnections ?? 4 });
    super(new PostgresDriver({ pool }), statements, POSTGRES_OUTBOX_MIGRATIONS);
    this.pool = pool;
    if (!options.pool) {
      const close = this.close.bind(this);
      this.close = async () => {
        await close();
        await pool.end();
      };
    }
  }

  /**
   * Holds one connection that LISTENs for committed enqueues and calls `onNotify` for each. Resolves to a stop
   * function. A lost connection calls `onLost`; the relay polls meanwhile and listens again later.
   */
  async listen(onNotify: () => void, onLost: (error: Error) => void): Promise<() => Promise<void>> {
    const client = await this.pool.connect();
    let released = false;
    const release = (error?: Error): void => {
      if (released) return;
      released = true;
      client.removeAllListeners("notification");
      client.release(error ?? true); // a listening connection is never handed to anyone else
    };
    client.on("notification", () => onNotify());
    client.on("error", (error: Error) => {
      release(error);
      onLost(error);
    });
    try {
      await client.query(LISTEN);
    } catch (error) {
      release(error as Error);
      throw error;
    }
    return () => Promise.resolve(release());
  }
}

export function createPostgresOutboxStore(options: PostgresOutboxOptions): PostgresOutboxStore {
  return new PostgresOutboxStore(options);
}
