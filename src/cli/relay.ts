import { loadConfig, type Config } from "../config/load.ts";
import { ConfigError } from "../domain/errors.ts";
import { startHealthServer } from "../http/health.ts";
import { openOutboxStore } from "../outbox/open.ts";
import { startRelay } from "../outbox/relay.ts";
import { createServiceBusClient } from "../servicebus/client.ts";
import { createOutboxSender } from "../servicebus/outbox-sender.ts";
import { createLogger } from "../telemetry/logger.ts";

const usage = `usage: sbinbox relay

Runs the outbox relay: sends the rows upstream transactions committed into the outbox table, in order, with
their derived MessageIds, and marks them sent. Migrates the outbox table first. Needs a database
(SBINBOX_POSTGRES_URL or SQL Server settings) and Service Bus (SBINBOX_SERVICEBUS_NAMESPACE or a connection
string); the identity needs the Azure Service Bus Data Sender role only. See docs/outbox.md.
Exit code 0 after a clean stop (SIGTERM or SIGINT), 2 on bad configuration.
`;

function relayConfig(): Config {
  const config = loadConfig({ purpose: "relay" });
  if (config.database.kind === "embedded")
    throw new ConfigError(
      "SBINBOX_DATABASE",
      "the relay needs the upstream database: set SBINBOX_POSTGRES_URL or the SQL Server settings",
    );
  return config;
}

export async function run(argv: string[]): Promise<number> {
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(usage);
    return 0;
  }
  if (argv.length > 0) {
    process.stderr.write(`sbinbox relay: unexpected argument "${argv[0]}"\n\n${usage}`);
    return 2;
  }
  let config: Config;
  try {
    config = relayConfig();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`sbinbox relay: configuration error: ${error.message}\n`);
    return 2;
  }
  const logger = createLogger({
    level: config.logLevel,
    fields: { service: config.serviceName, pid: process.pid },
  });
  if (config.database.kind === "embedded" || config.serviceBus.kind === "embedded") return 2; // ruled out above
  const store = await openOutboxStore(config.database);
  const client = createServiceBusClient(
    config.serviceBus.kind === "connection-string"
      ? { connectionString: config.serviceBus.connectionString }
      : { fullyQualifiedNamespace: config.serviceBus.fullyQualifiedNamespace },
  );
  const sender = createOutboxSender({ client, queue: config.queue });
  let stopRequested: (signal: string) => void = () => undefined;
  const stopped = new Promise<string>((resolve) => (stopRequested = resolve));
  process.on("SIGTERM", stopRequested);
  process.on("SIGINT", stopRequested);
  try {
    const { applied } = await store.migrate();
    if (applied.length > 0) logger.info("outbox migrated", { applied });
    const relay = await startRelay({
      store,
      sender,
      ...config.relay,
      onError: (error, during) => logger.warn("relay error", { during, error }),
    });
    const health = await startHealthServer({
      port: config.port,
      host: config.httpHost,
      readiness: () => relay.readiness(),
    });
    logger.info("relay ready", { queue: config.queue, httpPort: health.port });
    const signal = await stopped;
    logger.info("stopping", { signal });
    await relay.stop();
    await health.close();
    logger.info("stopped", { ...relay.counters });
    return 0;
  } catch (error) {
    logger.error("relay failed", { error });
    process.stderr.write(`sbinbox relay: ${(error as Error).message}\n`);
    return 1;
  } finally {
    await sender.close();
    await client.close();
    await store.close();
  }
}
