import { parseArgs } from "node:util";
import type { BrokerConfig, LocalBroker } from "sbinbox-dev";
import { devPackageOrSay, untilSignal } from "./dev-tools.ts";

const usage = `usage: sbinbox broker [--port 5672] [--host 127.0.0.1] [--config Config.json] [--verbose]

Runs the local Service Bus broker (in memory; for development and tests, never production).
--config takes the Service Bus emulator's Config.json shape; without it one queue, "sbinbox", is served.
`;

/** `sbinbox broker`: runs until SIGINT or SIGTERM, then stops cleanly. */
export async function run(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        port: { type: "string", default: "5672" },
        host: { type: "string", default: "127.0.0.1" },
        config: { type: "string" },
        verbose: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
    }));
  } catch (error) {
    process.stderr.write(`sbinbox broker: ${(error as Error).message}\n\n${usage}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(usage);
    return 0;
  }
  const dev = await devPackageOrSay("broker");
  if (!dev) return 2;
  const { BrokerConfigError, LocalBroker, consoleLogger, defaultConfig, loadConfigFile } = dev;
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(
      `sbinbox broker: --port must be an integer from 0 to 65535 (got "${values.port}")\n`,
    );
    return 2;
  }
  let config: BrokerConfig;
  try {
    config = values.config ? await loadConfigFile(values.config) : defaultConfig();
  } catch (error) {
    if (error instanceof BrokerConfigError) {
      process.stderr.write(`sbinbox broker: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
  for (const warning of config.warnings) process.stderr.write(`sbinbox broker: warning: ${warning}\n`);
  let broker: LocalBroker;
  try {
    broker = await LocalBroker.start({
      port,
      host: values.host,
      config,
      logger: consoleLogger(values.verbose),
    });
  } catch (error) {
    process.stderr.write(
      `sbinbox broker: cannot listen on ${values.host}:${port}: ${(error as Error).message}\n`,
    );
    return 1;
  }
  process.stdout.write(
    [
      `Local Service Bus broker (in memory, for development and tests) on ${values.host}:${broker.port}`,
      `Queues: ${broker.queueNames.join(", ") || "(none)"}`,
      ...config.topics.map(
        (t) =>
          `Topic ${t.name}: subscriptions ${t.subscriptions
            .map((s) => (s.queue.forwardTo === undefined ? s.name : `${s.name} -> ${s.queue.forwardTo}`))
            .join(", ")}`,
      ),
      `Connection string:`,
      broker.connectionString,
      "",
    ].join("\n"),
  );
  await untilSignal();
  await broker.stop();
  process.stdout.write("broker stopped\n");
  return 0;
}
