import { parseArgs } from "node:util";
import { loadConfig, type DatabaseConnection } from "../config/load.ts";
import { ConfigError } from "../domain/errors.ts";
import { createServiceBusClient } from "../servicebus/client.ts";
import { startConsoleServer } from "../console/server.ts";
import { createConsoleService, type ConsoleSources } from "../console/service.ts";

const usage = `usage: sbinbox console [--port N] [--host H [--allow-host NAME ...]]

  A local web page over the dead-letter queue (grouped by reason, replay or purge a group or a selection, with a
  confirmation), the entity's counts, and the inbox's and outbox's state when a database is configured.
    --port N     port to listen on (default 0: a free one, printed)
    --host H     address to listen on (default 127.0.0.1). Anything else serves the page, with your Service Bus
                 rights, beyond this machine, over plain HTTP: the printed URL then carries an access secret, the
                 only authentication, and a warning is printed
    --allow-host NAME
                 a name (or address) the page is reached by besides H, e.g. the machine's name (repeatable)

Settings as for \`sbinbox dlq\` (SBINBOX_SERVICEBUS_CONNECTION_STRING or SBINBOX_SERVICEBUS_NAMESPACE, SBINBOX_QUEUE:
on a topic, the service's own queue); the database as for the worker (SBINBOX_DATABASE, ...), optional.
`;

const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

export async function run(argv: string[], signal?: AbortSignal): Promise<number> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      options: {
        port: { type: "string" },
        host: { type: "string" },
        "allow-host": { type: "string", multiple: true },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }).values;
  } catch (error) {
    process.stderr.write(`sbinbox console: ${(error as Error).message}\n\n${usage}`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(usage);
    return 0;
  }
  const port = Number(args.port ?? "0");
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`sbinbox console: --port must be a whole number from 0 to 65535\n`);
    return 2;
  }
  const host = args.host ?? "127.0.0.1";
  const allowHosts = args["allow-host"] ?? [];
  const bad = allowHosts.find((name) => !/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)$/.test(name));
  if (bad !== undefined) {
    process.stderr.write(
      `sbinbox console: --allow-host ${JSON.stringify(bad)} is not a host name or address\n`,
    );
    return 2;
  }
  let config;
  try {
    config = loadConfig({ purpose: "dlq" });
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`sbinbox console: configuration error: ${error.message}\n`);
    return 2;
  }
  const sb = config.serviceBus;
  const client = createServiceBusClient(
    sb.kind === "namespace"
      ? { fullyQualifiedNamespace: sb.fullyQualifiedNamespace }
      : { connectionString: (sb as { connectionString: string }).connectionString },
  );
  const closers: (() => Promise<void>)[] = [() => client.close()];
  const sources: ConsoleSources = {
    client,
    entity: config.queue,
    ...(await databaseSources(config, closers)),
  };
  const beyond = !LOOPBACK.has(host);
  if (beyond) {
    process.stderr.write(
      `sbinbox console: WARNING: serving on ${host}, not loopback, over plain HTTP: whoever has the printed URL (its ` +
        `access secret is the only authentication) or sees the traffic can read dead-lettered messages and replay or ` +
        `purge them with your Service Bus rights\n`,
    );
  }
  const server = await startConsoleServer(createConsoleService(sources), {
    host,
    port,
    allowHosts,
    access: beyond,
  });
  closers.unshift(() => server.close());
  // Listening for the signals before the URL is out: whoever starts this may stop it as soon as it reads the URL.
  const stopped = new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    signal?.addEventListener("abort", stop, { once: true });
  });
  process.stdout.write(`sbinbox console: ${server.url} (${config.queue}); Ctrl-C stops it\n`);
  await stopped;
  for (const close of closers) await close().catch(() => undefined);
  return 0;
}

/** The inbox's and the outbox's state when a database is configured; nothing otherwise. */
async function databaseSources(
  config: { inboxSchema?: string },
  closers: (() => Promise<void>)[],
): Promise<Pick<ConsoleSources, "openClaims" | "outboxStatus">> {
  let database: DatabaseConnection;
  let windowMs: number;
  try {
    const worker = loadConfig({ purpose: "worker" });
    database = worker.database;
    windowMs = worker.relay.duplicateWindowMs - worker.relay.windowMarginMs;
  } catch (error) {
    if (error instanceof ConfigError) return {};
    throw error;
  }
  if (database.kind === "embedded") return {};
  const { openDatabase } = await import("../app/database.ts");
  const { openOutboxStore } = await import("../outbox/open.ts");
  const db = await openDatabase(database, {
    preCheck: "redeliveries",
    maxConnections: 2,
    inboxSchema: config.inboxSchema,
  });
  const outbox = await openOutboxStore(database);
  closers.push(
    () => db.close(),
    () => outbox.close(),
  );
  return { openClaims: () => db.store.countOpenClaims(), outboxStatus: () => outbox.status(windowMs) };
}
