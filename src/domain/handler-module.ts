import type { MessageHandler } from "./handler.ts";
import type { Dialect } from "./sql.ts";

/**
 * What a team deploys: its handlers and the migrations of the tables they write. `sbinbox worker` runs the
 * handlers; `sbinbox migrate` applies the migrations (after the inbox's) as the deployment's DDL-capable user, so
 * the worker itself never changes the schema. Both find the module through the SBINBOX_HANDLERS setting.
 */
export interface HandlerModule {
  /** Names the module's migration track in the database (lower case, digits, `-` and `_`); never rename it. */
  readonly name: string;
  /** The handlers, built once per worker process. */
  handlers(): readonly MessageHandler[] | Promise<readonly MessageHandler[]>;
  /** Per dialect, a folder of `NNNN_name.sql` files, applied once each, in order. */
  readonly migrations?: Partial<Record<Dialect, string>>;
}
