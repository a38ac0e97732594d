import pg from "pg";
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
