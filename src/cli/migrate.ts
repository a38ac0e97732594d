import { ConfigError } from "../domain/errors.ts";
import type { InboxStore, InboxStoreConfig } from "../inbox/index.ts";
import { parsers } from "../config/schema.ts";

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

/** The store for the target, loading only that database's driver. */
async function openStore(target: InboxStoreConfig): Promise<InboxStore> {
  if (target.kind === "postgres") {
    const { createPostgresInboxStore } = await import("../inbox/postgres/adapter.ts");
    return createPostgresInboxStore(target);
  }
  const { createSqlServerInboxStore } = await import("../inbox/sqlserver/adapter.ts");
  return createSqlServerInboxStore(target);
}

/**
 * `sbinbox migrate`: applies pending inbox migrations; `--outbox` the outbox's (an upstream service's database),
 * `--inbox --outbox` both. A no-op when none are pending.
 */
export async function run(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  out: (line: string) => void = (line) => process.stdout.write(`${line}\n`),
  err: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<number> {
  let target: InboxStoreConfig;
  try {
    target = migrateTarget(env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    err(`sbinbox migrate: ${error.message}`);
    return 2;
  }
  const unknown = argv.find((a) => a !== "--inbox" && a !== "--outbox");
  if (unknown !== undefined) {
    err(`sbinbox migrate: unexpected argument "${unknown}" (use --inbox, --outbox or both)`);
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
    const { applied } = await store.migrate();
    out(
      applied.length === 0 ? "sbinbox migrate: up to date" : `sbinbox migrate: applied ${applied.join(", ")}`,
    );
    return 0;
  } finally {
    await store.close();
  }
}
