import type { Dialect, SqlExecutor } from "../domain/sql.ts";
import type { InboxStore } from "../inbox/store.ts";
import type { DatabaseTimeouts } from "../inbox/timeouts.ts";
import type { PreCheckMode } from "../inbox/core.ts";

// The types both dialect openers and database.ts share, apart so that the openers do not import the module that
// loads them.

export interface Database {
  readonly dialect: Dialect;
  readonly store: InboxStore;
  /** Plain statements outside the inbox (the example's table set-up, the demo's counts). */
  readonly sql: SqlExecutor;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  readonly preCheck: PreCheckMode;
  readonly maxConnections: number;
  /** The schema of the inbox's tables; undefined: the dialect's default (dbo, public). */
  readonly inboxSchema?: string;
  /** Bounds on every database wait; the defaults when omitted. */
  readonly timeouts?: DatabaseTimeouts;
}

export type { DatabaseTarget } from "../config/load.ts";
