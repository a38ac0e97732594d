import { loadConfig, type Config } from "../config/load.ts";
import { ConfigError } from "../domain/errors.ts";
import { startHealthServer, type ReadinessReport } from "../http/health.ts";
import { outboxDatabaseStartupFailure, serviceBusStartupFailure } from "../app/startup-classify.ts";
import { StartupAbortedError, startWhenReachable, type StartupState } from "../app/startup.ts";
import { openOutboxStore } from "../outbox/open.ts";
import { startRelay, type Relay } from "../outbox/relay.ts";
import { createServiceBusClient, type ServiceBusTarget } from "../servicebus/client.ts";
import { probeSender } from "../servicebus/probe.ts";
import { createOutboxSender } from "../servicebus/outbox-sender.ts";
import { createLogger } from "../telemetry/logger.ts";
import { whenNpmParentGone } from "./npm-parent.ts";

const usage = `usage: sbinbox relay

Runs the outbox relay: sends the rows upstream transactions committed into the outbox table, in order, with
their derived MessageIds, and marks them sent. Migrates the outbox table first. Needs a database
(SBINBOX_POSTGRES_URL or SQL Server settings) and Service Bus (SBINBOX_SERVICEBUS_NAMESPACE or a connection
string); the identity needs the Azure Service Bus Data Sender role only. See docs/outbox.md.
While the database or Service Bus cannot be reached at start-up it waits (/healthz 200, /readyz 503); a refusal
(bad login, missing queue) is retried for SBINBOX_STARTUP_LIMIT_MS, then it exits 1.
Exit code 0 after a clean stop (SIGTERM or SIGINT, also while waiting; started by npm, also npm's exit), 1 when
start-up fails, 2 on bad configuration.
`;

/** One start-up look at the queue; the wait between looks is the outage back-off. */
const PROBE_TIMEOUT_MS = 10_000;

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
  const target: ServiceBusTarget =
    config.serviceBus.kind === "connection-string"
      ? { connectionString: config.serviceBus.connectionString }
      : { fullyQualifiedNamespace: config.serviceBus.fullyQualifiedNamespace };
  // One try per send, bounded by SBINBOX_OUTBOX_SEND_TIMEOUT_MS (the SDK's defaults, 3 retries of up to 60 s
  // with 30 s between, could outlast the lease and the window); the relay retries with its own back-off.
  const client = createServiceBusClient(target, {
    retryOptions: { maxRetries: 0, timeoutInMs: config.relay.sendTimeoutMs },
  });
  const sender = createOutboxSender({ client, queue: config.queue });
  const abort = new AbortController();
  let stopRequested: (signal: string) => void = () => undefined;
  const stopped = new Promise<string>((resolve) => (stopRequested = resolve));
  const onSignal = (signal: string): void => {
    abort.abort();
    stopRequested(signal);
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  whenNpmParentGone(() => {
    if (abort.signal.aborted) return; // already stopping (a Ctrl-C reaches npm and the relay alike)
    logger.warn("the npm process that started this relay is gone: stopping as on SIGTERM");
    onSignal("npm exited");
  });
  let relay: Relay | undefined;
  const startup: Record<string, StartupState> = {};
  // Listening first, so /healthz answers while start-up waits for the database and Service Bus.
  const health = await startHealthServer({
    port: config.port,
    host: config.httpHost,
    readiness: async (): Promise<ReadinessReport> =>
      relay ? relay.readiness() : { ready: false, status: "starting", ...startup },
    onError: (error) => logger.warn("readiness check failed", { error }),
  });
  try {
    await startWhenReachable(
      [
        {
          name: "database",
          attempt: async () => {
            const { applied } = await store.migrate();
            if (applied.length > 0) logger.info("outbox migrated", { applied });
          },
          classify: outboxDatabaseStartupFailure,
        },
        {
          name: "serviceBus",
          attempt: (signal) => probeSender(target, config.queue, { timeoutMs: PROBE_TIMEOUT_MS, signal }),
          classify: serviceBusStartupFailure,
        },
      ],
      {
        backoffMinMs: config.outageBackoffMinMs,
        backoffMaxMs: config.outageBackoffMaxMs,
        refusedLimitMs: config.startupLimitMs,
        signal: abort.signal,
        logger,
        onState: (step, state) => (startup[step] = state),
      },
    );
    const killAfter = config.faultKillAfterSend;
    relay = await startRelay({
      store,
      sender,
      ...config.relay,
      // Fault injection (chaos runs, tests): die between the broker's accept and the mark, as a crash would.
      afterSend: killAfter
        ? (_sentIds, sentMessageIds) => {
            if (sentMessageIds.includes(killAfter)) {
              logger.warn("fault injection: killing the relay between send and mark", {
                messageId: killAfter,
              });
              process.kill(process.pid, "SIGKILL");
            }
          }
        : undefined,
      onError: (error, during) => logger.warn("relay error", { during, error }),
    });
    logger.info("relay ready", { queue: config.queue, httpPort: health.port });
    const signal = await stopped;
    logger.info("stopping", { signal });
    await relay.stop();
    logger.info("stopped", { ...relay.counters });
    return 0;
  } catch (error) {
    if (error instanceof StartupAbortedError) {
      logger.info("stopped while waiting at start-up");
      return 0;
    }
    logger.error("relay failed", { error });
    process.stderr.write(`sbinbox relay: ${(error as Error).message}\n`);
    return 1;
  } finally {
    await health.close();
    await sender.close();
    await client.close();
    await store.close();
  }
}
