import pg from "pg";
import { createDatabaseAt, EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";

/** Where the run's server is: set by the global fixture (test/helpers/hooks.ts) for every worker process. */
export const SHARED_POSTGRES_ENV = "SBINBOX_TEST_POSTGRES_URL";

let own: Promise<EmbeddedPostgresServer> | undefined;
let counter = 0;

/**
 * The run's one embedded PostgreSQL server, started by the global fixture before any file runs, so the files that
 * mocha runs side by side (each in its own process) share a server and never a database. A process started without
 * the fixture (a script importing this helper) starts a server of its own, stopped by `stopOwnPostgres`.
 */
async function adminUrl(): Promise<string> {
  const url = process.env[SHARED_POSTGRES_ENV];
  if (url) return url;
  own ??= EmbeddedPostgresServer.create();
  return (await own).url();
}

/** A fresh, empty database for one test file (or one test); the name says which, for post-mortems. */
export async function createTestDatabase(label: string): Promise<string> {
  const admin = await adminUrl();
  counter += 1;
  const name = `t_${label
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "_")
    .slice(0, 40)}_${process.pid}_${counter}`;
  return createDatabaseAt(admin, name);
}

export async function stopOwnPostgres(): Promise<void> {
  if (!own) return;
  const server = await own;
  own = undefined;
  await server.dispose();
}

/**
 * A database owned by a login role "app" on a server of the test's own, and an admin session that can take the
 * role's logins away (`refuseLogins`) and give them back: PostgreSQL refusing logins, as in a failover or a
 * credential rotation gone wrong.
 */
export async function appRoleDatabase(
  server: EmbeddedPostgresServer,
  name: string,
): Promise<{
  admin: pg.Client;
  appUrl: string;
  refuseLogins(): Promise<void>;
  allowLogins(): Promise<void>;
}> {
  const adminUrl = await server.createDatabase(name);
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE ROLE app LOGIN PASSWORD 'app'`);
  await admin.query(`ALTER DATABASE ${name} OWNER TO app`);
  const url = new URL(adminUrl);
  url.username = "app";
  url.password = "app";
  return {
    admin,
    appUrl: url.toString(),
    async refuseLogins() {
      await admin.query(`ALTER ROLE app NOLOGIN`);
      await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app'`);
    },
    async allowLogins() {
      await admin.query(`ALTER ROLE app LOGIN`);
    },
  };
}
