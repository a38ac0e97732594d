import { loadHandlerModule } from "../app/handler-module.ts";
import { migrateStore, openStore } from "../app/migrate.ts";
import { parsers } from "../config/schema.ts";
import type mssql from "mssql";
import { isPublicAccessRefusal, PUBLIC_ACCESS_DENIED } from "../inbox/sqlserver/public-access.ts";
import { ConfigError } from "../domain/errors.ts";
import type { HandlerModule } from "../domain/handler-module.ts";
import { appRoles, appUserBatch, FIREWALL_REFUSED, isFirewallRefusal } from "../inbox/sqlserver/app-user.ts";
import type { InboxStoreConfig } from "../inbox/index.ts";
import { MigrationFailedError, MigrationFileError, needingOldWorkersStopped } from "../inbox/migrations.ts";

/** The database to migrate, from the environment (exactly one of the two variables). */
export function migrateTarget(env: NodeJS.ProcessEnv): InboxStoreConfig {
  const url = env.SBINBOX_POSTGRES_URL?.trim();
  const connectionString = env.SBINBOX_SQLSERVER_CONNECTION_STRING?.trim();
  if (url && connectionString) {
    throw new ConfigError(
      "SBINBOX_POSTGRES_URL, SBINBOX_SQLSERVER_CONNECTION_STRING",
      "set only one: the inbox lives in one database",
    );
  }
  const schema = inboxSchema(env);
  if (url) return { kind: "postgres", url, maxConnections: 1, schema };
  if (connectionString) return { kind: "sqlserver", config: connectionString, schema };
  throw new ConfigError("SBINBOX_POSTGRES_URL or SBINBOX_SQLSERVER_CONNECTION_STRING", "not set");
}

function inboxSchema(env: NodeJS.ProcessEnv): string | undefined {
  const raw = env.SBINBOX_INBOX_SCHEMA?.trim() || undefined;
  const parsed = parsers.SBINBOX_INBOX_SCHEMA.safeParse(raw);
  if (!parsed.success)
    throw new ConfigError(
      "SBINBOX_INBOX_SCHEMA",
      `${parsed.error.issues[0]?.message ?? "is invalid"} (got ${JSON.stringify(raw)})`,
    );
  return parsed.data;
}

/** SBINBOX_HANDLERS, validated as the worker validates it. */
function handlersSetting(env: NodeJS.ProcessEnv): string | undefined {
  const raw = env.SBINBOX_HANDLERS;
  if (raw === undefined || raw.trim() === "") return undefined;
  const parsed = parsers.SBINBOX_HANDLERS.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError("SBINBOX_HANDLERS", parsed.error.issues[0]?.message ?? "invalid");
  }
  return parsed.data;
}

const usage = `usage: sbinbox migrate [--inbox] [--outbox] [--workers-stopped] [--app-user <identity name> --app-client-id <client id>]

Applies pending migrations: the inbox's, then those of the handler module SBINBOX_HANDLERS names (the example's when
unset); with --outbox the outbox's instead (an upstream service's database), with --inbox --outbox both. The database comes from SBINBOX_POSTGRES_URL or SBINBOX_SQLSERVER_CONNECTION_STRING; run it as a user with
DDL rights. With --app-user (SQL Server), also makes that managed identity a database user with db_datareader and
db_datawriter only, created from its client ID. Exit code 75 when Azure SQL's firewall refused this machine (error
40615): a new firewall rule can take minutes to apply, so the caller may retry. Exit code 77 when the server's public
network access is off (error 47073 or 42101): run it from inside the virtual network. Exit code 76, nothing applied,
when a pending inbox migration cannot run beside the previous version's workers (0002_inbox_markers) and
--workers-stopped is not given: deploy the new code first (its workers wait for the migration), then migrate with
--workers-stopped (docs/inbox.md, "Moving to 0002").
`;

/** The options; throws a ConfigError naming the bad one. */
export function migrateOptions(argv: string[]): { appUser?: string; appClientId?: string } {
  const options: { appUser?: string; appClientId?: string } = {};
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    if (flag === "--inbox" || flag === "--outbox" || flag === "--workers-stopped") continue; // read by run()
    const value = argv[i + 1];
    if (flag !== "--app-user" && flag !== "--app-client-id") throw new ConfigError(flag, "unknown option");
    if (value === undefined || value.startsWith("--")) throw new ConfigError(flag, "needs a value");
    if (flag === "--app-user") options.appUser = value;
    else options.appClientId = value;
    i++;
  }
  if ((options.appUser === undefined) !== (options.appClientId === undefined)) {
    throw new ConfigError("--app-user, --app-client-id", "give both or neither");
  }
  return options;
}

/**
 * `sbinbox migrate`: applies pending migrations, the inbox's and then those of the handler module SBINBOX_HANDLERS
 * names (the example's when unset); a no-op when none are pending. Run by the deployment with DDL rights.
 */
export async function run(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  out: (line: string) => void = (line) => process.stdout.write(`${line}\n`),
  err: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<number> {
  if (argv.includes("--help") || argv.includes("-h")) {
    out(usage);
    return 0;
  }
  let target: InboxStoreConfig;
  let module: HandlerModule;
  let options: ReturnType<typeof migrateOptions>;
  let userBatch: string | undefined;
  try {
    options = migrateOptions(argv);
    target = migrateTarget(env);
    if (options.appUser !== undefined && target.kind !== "sqlserver") {
      throw new ConfigError("--app-user", "creates an Entra database user, so it needs SQL Server");
    }
    if (options.appUser !== undefined) userBatch = appUserBatch(options.appUser, options.appClientId!);
    module = await loadHandlerModule(handlersSetting(env));
  } catch (error) {
    if (!(error instanceof ConfigError) && !(error instanceof Error && /^--app-/.test(error.message))) {
      throw error;
    }
    err(`sbinbox migrate: ${error.message}`);
    return 2;
  }
  const outbox = argv.includes("--outbox");
  const inbox = argv.includes("--inbox") || !outbox;
  if (outbox) {
    const { openOutboxStore } = await import("../outbox/open.ts");
    // migrateTarget has checked that exactly one of the two is set.
    const url = env.SBINBOX_POSTGRES_URL?.trim();
    const store = await openOutboxStore(
      url
        ? { kind: "postgres", url }
        : { kind: "sqlserver", connectionString: String(env.SBINBOX_SQLSERVER_CONNECTION_STRING).trim() },
    );
    try {
      const { applied } = await store.migrate();
      out(
        applied.length === 0
          ? "sbinbox migrate: outbox up to date"
          : `sbinbox migrate: outbox applied ${applied.join(", ")}`,
      );
    } finally {
      await store.close();
    }
  }
  if (!inbox) return 0;
  const store = await openStore(target);
  try {
    if (!argv.includes("--workers-stopped")) {
      const blocked = needingOldWorkersStopped(await store.pendingMigrations());
      if (blocked.length > 0) {
        err(
          `sbinbox migrate: ${blocked.join(", ")} cannot run beside the previous version's workers (they would ` +
            `fail every message until replaced): nothing applied. Deploy the new code first (its workers wait for ` +
            `the migration), then run sbinbox migrate --workers-stopped (docs/inbox.md, "Moving to 0002")`,
        );
        return WORKERS_RUNNING_EXIT_CODE;
      }
    }
    const { applied } = await migrateStore(store, module, (warning) =>
      err(`sbinbox migrate: warning: ${warning}`),
    );
    out(
      applied.length === 0 ? "sbinbox migrate: up to date" : `sbinbox migrate: applied ${applied.join(", ")}`,
    );
    if (userBatch !== undefined && target.kind === "sqlserver" && "config" in target) {
      await runSqlServerBatch(target.config, userBatch);
      out(`sbinbox migrate: database user [${options.appUser}]: ${appRoles.join(", ")}`);
    }
    return 0;
  } catch (error) {
    if (target.kind === "sqlserver" && (await refusedForPublicAccess(error))) {
      err(
        `sbinbox migrate: the SQL server's public network access is off (error ${PUBLIC_ACCESS_DENIED.join(" or ")}); ` +
          `run this from inside its virtual network, through the private endpoint: ${(error as Error).message}`,
      );
      return PUBLIC_ACCESS_EXIT_CODE;
    }
    if (target.kind === "sqlserver" && (await refusedByFirewall(error))) {
      err(
        `sbinbox migrate: the SQL server's firewall refused this machine (error ${FIREWALL_REFUSED}); ` +
          `a new rule can take minutes to apply: ${(error as Error).message}`,
      );
      return FIREWALL_EXIT_CODE;
    }
    // A team's own mistake in its migrations: said in one line, naming the file, without a stack.
    if (error instanceof MigrationFileError) {
      err(`sbinbox migrate: ${error.message}`);
      return 2;
    }
    if (error instanceof MigrationFailedError) {
      err(`sbinbox migrate: ${error.message}`);
      return 1;
    }
    throw error;
  } finally {
    await store.close();
  }
}

/** EX_TEMPFAIL: "try again later", which the post-provision script does, within a bound. */
export const FIREWALL_EXIT_CODE = 75;

async function refusedByFirewall(error: unknown): Promise<boolean> {
  const { sqlServerErrorChain } = await import("../inbox/sqlserver/error-chain.ts");
  return sqlServerErrorChain(error).some(isFirewallRefusal);
}

/** EX_NOPERM: no retry helps; the machine must be inside the network. */
export const PUBLIC_ACCESS_EXIT_CODE = 77;

/** Exit code when a pending migration needs the previous version's workers stopped and no one said they are. */
export const WORKERS_RUNNING_EXIT_CODE = 76;

async function refusedForPublicAccess(error: unknown): Promise<boolean> {
  const { sqlServerErrorChain } = await import("../inbox/sqlserver/error-chain.ts");
  return sqlServerErrorChain(error).some(isPublicAccessRefusal);
}

async function runSqlServerBatch(config: mssql.config | string, batch: string): Promise<void> {
  const { default: mssql } = await import("mssql");
  const pool =
    typeof config === "string" ? new mssql.ConnectionPool(config) : new mssql.ConnectionPool(config);
  await pool.connect();
  try {
    await pool.request().batch(batch);
  } finally {
    await pool.close();
  }
}
