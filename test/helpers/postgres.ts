import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";

let shared: Promise<EmbeddedPostgresServer> | undefined;
let counter = 0;

/** One embedded PostgreSQL server per test run, started on first use and stopped by the root hook. */
export function sharedPostgres(): Promise<EmbeddedPostgresServer> {
  shared ??= EmbeddedPostgresServer.create();
  return shared;
}

/** A fresh, empty database for one test file (or one test); the name says which, for post-mortems. */
export async function createTestDatabase(label: string): Promise<string> {
  const server = await sharedPostgres();
  counter += 1;
  const name = `t_${label
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "_")
    .slice(0, 40)}_${process.pid}_${counter}`;
  return server.createDatabase(name);
}

export async function stopSharedPostgres(): Promise<void> {
  if (!shared) return;
  const server = await shared;
  shared = undefined;
  await server.dispose();
}
