import { fileURLToPath } from "node:url";
import type mssql from "mssql";
import { SqlServerDriver } from "../../inbox/sqlserver/adapter.ts";
import type { MigrationSet } from "../../inbox/migrations.ts";
import { OutboxStore } from "../store.ts";
import {
  ACQUIRE_MIGRATION_LOCK,
  CREATE_VERSION_TABLE,
  RECORD_VERSION,
  SELECT_APPLIED_VERSIONS,
  statements,
} from "./statements.ts";

export const SQLSERVER_OUTBOX_MIGRATIONS: MigrationSet = {
  dir: fileURLToPath(new URL("./migrations/", import.meta.url)),
  lockKey: "SbOutboxMigrate",
  acquireLock: ACQUIRE_MIGRATION_LOCK,
  createVersionTable: CREATE_VERSION_TABLE,
  selectAppliedVersions: SELECT_APPLIED_VERSIONS,
  recordVersion: RECORD_VERSION,
};

export interface SqlServerOutboxOptions {
  /** A ready pool (then the store does not close it), an mssql config or a connection string. */
  readonly pool?: mssql.ConnectionPool;
  readonly config?: mssql.config | string;
}

/** The outbox on SQL Server / Azure SQL, on the inbox's driver (same pool handling, same migrations runner). */
export function createSqlServerOutboxStore(options: SqlServerOutboxOptions): OutboxStore {
  return new OutboxStore(new SqlServerDriver(options), statements, SQLSERVER_OUTBOX_MIGRATIONS);
}
