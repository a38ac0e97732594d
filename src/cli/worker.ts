import { startApp } from "../app/app.ts";
import { StartupAbortedError, StartupFailedError } from "../app/startup.ts";
import { loadConfig, type Config } from "../config/load.ts";
import { ConfigError } from "../domain/errors.ts";
import { createLogger } from "../telemetry/logger.ts";
import { whenNpmParentGone } from "./npm-parent.ts";

const usage = `usage: sbinbox worker

Runs the worker: peek-lock receive, one inbox transaction per message, explicit settlement.
Configured by environment variables (or a JSON file named by SBINBOX_CONFIG_FILE); see docs/configuration.md.
With no configuration it starts the local broker and an embedded PostgreSQL itself.
While the database or Service Bus cannot be reached it waits for them (/healthz answers, /readyz says why not).
SIGTERM or SIGINT stop it gracefully, at once while it waits; started by npm (npx sbinbox worker, npm start), so
does npm's exit. Exit code 0 after a clean stop, 2 on bad
configuration, 1 when start-up fails for good (a refusal longer than SBINBOX_STARTUP_LIMIT_MS).
`;

/** Reads the configuration or reports the bad setting on stderr. */
export function configOrExit(command: string): Config | undefined {
  try {
    return loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`sbinbox ${command}: configuration error: ${error.message}\n`);
      return undefined;
    }
    throw error;
  }
}

export async function run(argv: string[]): Promise<number> {
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(usage);
    return 0;
  }
  if (argv.length > 0) {
    process.stderr.write(`sbinbox worker: unexpected argument "${argv[0]}"\n\n${usage}`);
    return 2;
  }
  const config = configOrExit("worker");
  if (!config) return 2;
  const logger = createLogger({
    level: config.logLevel,
    fields: { service: config.serviceName, pid: process.pid },
  });
  let stopRequested: (signal: string) => void = () => undefined;
  const stopped = new Promise<string>((resolve) => (stopRequested = resolve));
  // A signal while start-up waits ends the wait at once.
  const starting = new AbortController();
  let signals = 0;
  const onSignal = (signal: string): void => {
    signals += 1;
    if (signals > 1) {
      logger.warn("second signal: exiting at once", { signal });
      process.exit(130);
    }
    starting.abort();
    stopRequested(signal);
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  whenNpmParentGone(() => {
    // Already stopping (a Ctrl-C reaches the whole group, npm included): npm's exit is no second signal.
    if (signals > 0) return;
    logger.warn(
      "the npm process that started this worker is gone (npm passes a SIGTERM to its shell, not on to the worker): stopping as on SIGTERM",
    );
    onSignal("npm exited");
  });
  let app;
  try {
    app = await startApp(config, { logger, signal: starting.signal });
  } catch (error) {
    if (error instanceof StartupAbortedError) {
      logger.info("stopped while waiting to start", { signal: await stopped });
      // Whatever the abandoned attempt still holds (a connect in progress) must not delay the exit.
      setTimeout(() => process.exit(0), 1_000).unref();
      return 0;
    }
    if (error instanceof ConfigError) {
      // Named, one line, no stack: nothing was started (startApp loads the handler module first).
      process.stderr.write(`sbinbox worker: configuration error: ${error.message}\n`);
      setTimeout(() => process.exit(2), 1_000).unref();
      return 2;
    }
    const what = error instanceof StartupFailedError ? error.step : "start-up";
    logger.error("worker failed to start", { step: what, error });
    process.stderr.write(`sbinbox worker: failed to start: ${(error as Error).message}\n`);
    setTimeout(() => process.exit(1), 1_000).unref();
    return 1;
  }
  logger.info("worker ready", {
    httpPort: app.httpPort,
    embeddedConnectionString: app.embeddedConnectionString,
  });
  // The entity's answer can come after start-up stopped waiting for it (a loaded machine, a slow attach): a receiver
  // of the wrong kind is then still a configuration error that no retry mends, and the process ends as start-up would.
  // Watched, not awaited once: a refused link can look open for a moment before its detach arrives.
  let late: Error | undefined;
  const watch = setInterval(() => {
    late = app.worker.mismatch;
    if (late !== undefined) stopRequested("mismatch");
  }, 250).unref();
  const signal = await stopped;
  clearInterval(watch);
  if (late !== undefined) {
    process.stderr.write(`sbinbox worker: configuration error: ${late.message}\n`);
    await app.stop();
    setTimeout(() => process.exit(2), 1_000).unref();
    return 2;
  }
  logger.info("stopping gracefully", { signal, gracePeriodMs: config.gracePeriodMs });
  // A backstop: whatever still holds the event loop after the grace period cannot delay the exit for long.
  setTimeout(() => process.exit(0), config.gracePeriodMs + 10_000).unref();
  await app.stop();
  logger.info("stopped", { ...app.worker.stats });
  setTimeout(() => process.exit(0), 2_000).unref();
  return 0;
}
