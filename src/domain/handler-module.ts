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
  /**
   * Releases what the module's handlers opened for themselves (a pool of its own, an HTTP agent): called once at
   * shutdown, after the worker has stopped (no handler runs any more) and before the worker's database and broker
   * close, by `sbinbox worker` and by the test harness's `stop`. A throw does not stop the rest of the shutdown.
   */
  stop?(): void | Promise<void>;
}

/** The function each kind of handler must have. */
const KIND_FUNCTION = { transactional: "handle", statements: "statements", "two-phase": "perform" } as const;

/**
 * Checks the shape of a handler a module gives (a JavaScript module, or a cast, can give anything): its kind, its
 * type, its schema and its kind's function. Throws a TypeError naming the handler and what is wrong.
 */
export function checkHandler(handler: unknown): asserts handler is MessageHandler {
  if (typeof handler !== "object" || handler === null) throw new TypeError("a handler is not an object");
  const h = handler as Record<string, unknown>;
  const name = typeof h.type === "string" && h.type !== "" ? `handler "${h.type}"` : "a handler";
  if (typeof h.type !== "string" || h.type === "")
    throw new TypeError(`${name} has no type (a non-empty string)`);
  const kind = h.kind as keyof typeof KIND_FUNCTION;
  if (!Object.hasOwn(KIND_FUNCTION, kind))
    throw new TypeError(
      `${name} has kind ${JSON.stringify(h.kind)}; a handler's kind is "transactional", "statements" or "two-phase"`,
    );
  if (typeof (h.schema as { safeParse?: unknown } | undefined)?.safeParse !== "function")
    throw new TypeError(`${name} has no schema (a zod schema)`);
  if (typeof h[KIND_FUNCTION[kind]] !== "function")
    throw new TypeError(`${name} is of kind "${kind}" but has no ${KIND_FUNCTION[kind]}() function`);
  if (
    h.personal !== undefined &&
    !(Array.isArray(h.personal) && h.personal.every((f) => typeof f === "string" && f !== ""))
  )
    throw new TypeError(`${name} has personal that is not a list of field paths (e.g. ["customer.email"])`);
  if (h.keys !== undefined && typeof h.keys !== "function")
    throw new TypeError(`${name} has keys that are not a function: (body, context) => a key or keys`);
}
