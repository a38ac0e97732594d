import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import { SHARED_POSTGRES_ENV, stopOwnPostgres } from "./postgres.ts";

let server: EmbeddedPostgresServer | undefined;

// Global fixtures run once, in mocha's main process, before the files (and, in parallel mode, before the worker
// processes start, so they inherit the variable).
export async function mochaGlobalSetup(): Promise<void> {
  // SBINBOX_TEST_POSTGRES=off: a run of SQL Server-only files (scripts/sqlserver-tier.sh) starts no PostgreSQL.
  if (process.env[SHARED_POSTGRES_ENV] || process.env.SBINBOX_TEST_POSTGRES === "off") return;
  server = await EmbeddedPostgresServer.create();
  process.env[SHARED_POSTGRES_ENV] = server.url();
}

export async function mochaGlobalTeardown(): Promise<void> {
  await server?.dispose();
  server = undefined;
}

export const mochaHooks = {
  async afterAll(this: Mocha.Context): Promise<void> {
    this.timeout(30_000);
    await stopOwnPostgres();
  },
};
