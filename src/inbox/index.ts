import type mssql from "mssql";
import type pg from "pg";
import type { InboxStoreOptions } from "./core.ts";
import { createPostgresInboxStore } from "./postgres/adapter.ts";
import { createSqlServerInboxStore } from "./sqlserver/adapter.ts";
import type { InboxStore } from "./store.ts";
import type { DatabaseTimeouts } from "./timeouts.ts";

export type {
  InboxStore,
  InboxKey,
  InboxClaimOutcome,
  MigrationResult,
  ModuleMigrations,
  CleanupOptions,
} from "./store.ts";
export { loadMigrations, type Migration } from "./migrations.ts";
export type { InboxStoreOptions } from "./core.ts";
export { ClaimLostError, TransactionControlError, UnawaitedStatementError } from "./errors.ts";
export { DEFAULT_DATABASE_TIMEOUTS, type DatabaseTimeouts } from "./timeouts.ts";
export { validateRetention, minimumRetentionMs, type RedeliveryWindow } from "./retention.ts";

/** Which database the inbox lives in. The store is the same for every consumer: the key carries the consumer. */
export type InboxDatabaseConfig =
  | {
      readonly kind: "postgres";
      readonly url: string;
      readonly maxConnections?: number;
      readonly timeouts?: DatabaseTimeouts;
    }
  | { readonly kind: "postgres"; readonly pool: pg.Pool }
  | {
      readonly kind: "sqlserver";
      readonly config: mssql.config | string;
      readonly timeouts?: DatabaseTimeouts;
    }
  | { readonly kind: "sqlserver"; readonly pool: mssql.ConnectionPool };

export type InboxStoreConfig = InboxDatabaseConfig &
  InboxStoreOptions & {
    /** The schema of the inbox's tables: default dbo on SQL Server, public on PostgreSQL. */
    readonly schema?: string;
  };

/** Builds the store for the configured database. Connects lazily: nothing happens until the first call. */
export function createInboxStore(config: InboxStoreConfig): InboxStore {
  if (config.kind === "postgres") return createPostgresInboxStore(config);
  return createSqlServerInboxStore(config);
}
