import type { Config, DatabaseTarget, ServiceBusConnection } from "../config/load.ts";
import type { MessageHandler } from "../domain/handler.ts";
import { startHealthServer, type HealthServer, type ReadinessReport } from "../http/health.ts";
import {
  createServiceBusClient,
  lazyDefaultAzureCredential,
  type ServiceBusClient,
  type ServiceBusTarget,
} from "../servicebus/client.ts";
import { probeQueue } from "../servicebus/probe.ts";
import { OWN_RETRY } from "../servicebus/throttling.ts";
import { createLogger, type Logger } from "../telemetry/logger.ts";
import { startupMetrics } from "../telemetry/startup-metrics.ts";
import { createWorker, type Worker } from "../worker/worker.ts";
import { defaultRetryPolicy } from "../worker/retry-policy.ts";
import { openDatabase, type Database } from "./database.ts";
import { loadHandlerModule, moduleMigrations, SchemaNotMigratedError } from "./handler-module.ts";
import type { EmbeddedBroker } from "./embedded-broker.ts";
import { EMBEDDED_DEFAULTS, loadDevPackage } from "./dev-package.ts";
import { databaseStartupFailure, serviceBusStartupFailure } from "./startup-classify.ts";
import { startWhenReachable, type StartupState } from "./startup.ts";

/** One start-up look at the queue waits at most this long for Service Bus to answer. */
const PROBE_TIMEOUT_MS = 10_000;
/** How long start-up waits for the refusal of a session receiver on an entity without sessions (see startApp). */
const SESSION_REFUSAL_MS = 2_000;

export interface AppOptions {
  /** The handlers to run (their tables already migrated); the module SBINBOX_HANDLERS names when omitted. */
  readonly handlers?: readonly MessageHandler[];
  readonly logger?: Logger;
  /** Called instead of killing the process when the fault-injection switch fires (tests). */
  readonly kill?: () => void;
  /**
   * Aborts start-up while it waits for the database or Service Bus: startApp then releases what it opened and
   * rejects with StartupAbortedError. Without it start-up waits until both answer or one refuses for too long.
   */
  readonly signal?: AbortSignal;
}

export interface App {
  readonly worker: Worker;
  readonly httpPort: number;
  /** Set on embedded defaults: where publishers reach the in-process broker. */
  readonly embeddedConnectionString?: string;
  stop(): Promise<void>;
}

/**
 * The composition root: reads nothing itself (the config is given), wires broker client, inbox store, handlers
 * and the HTTP listener, and owns start and stop. With nothing configured it starts the local broker and an
 * embedded PostgreSQL and stops them with itself.
 *
 * The HTTP listener comes first, so /healthz answers while start-up waits: a database or Service Bus that
 * cannot be reached is retried with the outage back-off (SBINBOX_OUTAGE_BACKOFF_*) for as long as it takes, a
 * refusal for at most SBINBOX_STARTUP_LIMIT_MS (then StartupFailedError). It resolves once the inbox is migrated
 * and the worker receives.
 */
export async function startApp(config: Config, options: AppOptions = {}): Promise<App> {
  const logger =
    options.logger ?? createLogger({ level: config.logLevel, fields: { service: config.serviceName } });
  const cleanups: (() => Promise<void>)[] = [];
  const stopAll = async (): Promise<void> => {
    for (const cleanup of cleanups.splice(0).reverse()) {
      try {
        await cleanup();
      } catch (error) {
        logger.warn("stopping a component failed", { error });
      }
    }
  };
  let worker: Worker | undefined;
  const startup: Record<string, StartupState> = {};
  const readiness = async (): Promise<ReadinessReport> => {
    if (!worker) return { ready: false, status: "starting", ...startup };
    const { ready, status, receiver, database, serviceBus } = await worker.readiness();
    return { ready, status, receiver, database, serviceBus, ...benchLayersOffReport(config) };
  };
  // First: a module that cannot be loaded is a configuration error, said before anything starts (the HTTP listener
  // included, so no /healthz answers 200 from a worker that will never run).
  const module = options.handlers ? undefined : await loadHandlerModule(config.handlersModule);
  const health: HealthServer = await startHealthServer({
    port: config.port,
    host: config.httpHost,
    readiness,
    onError: (error) => logger.warn("readiness check failed", { error }),
  });
  cleanups.push(() => health.close());
  // The same answer as /readyz, as a gauge per instance: the "not ready anywhere" alert reads it.
  const stopReadiness = startupMetrics.observeReadiness(async () => (await readiness()).ready);
  cleanups.push(() => Promise.resolve(stopReadiness()));
  logger.info("http listening", { port: health.port, host: config.httpHost });
  try {
    const { connection, serviceBus, embeddedConnectionString } = await startEmbeddedDefaults(
      config,
      logger,
      cleanups,
    );
    // The pool connects lazily: opening it cannot fail for an unreachable server.
    const db: Database = await openDatabase(connection, {
      preCheck: config.precheck,
      inboxSchema: config.inboxSchema,
      maxConnections: config.maxConcurrentCalls + 4,
      timeouts: config.databaseTimeouts,
    });
    cleanups.push(() => db.close());
    const migrations = module ? await moduleMigrations(module, db.dialect) : undefined;
    const handlers = options.handlers ?? (await module!.handlers());
    // Run after the worker's stop (cleanups run in reverse) and before the database closes: the module's own
    // pool ends while the server it talks to is still up.
    if (module?.stop) cleanups.push(async () => await module.stop!());
    // One credential for the start-up probes and the worker's client, so its token cache is shared.
    const target: ServiceBusTarget =
      serviceBus.kind === "namespace"
        ? {
            fullyQualifiedNamespace: serviceBus.fullyQualifiedNamespace,
            credential: lazyDefaultAzureCredential(),
          }
        : { connectionString: serviceBus.connectionString };
    await waitUntilReachable(config, options, {
      db,
      migrations,
      target,
      embedded: embeddedConnectionString !== undefined,
      logger,
      startup,
    });

    // One SDK try per call: the worker retries a throttled settlement, renewal or schedule itself, bounded by the
    // message's lock (src/servicebus/throttling.ts), which a retry inside the SDK (30 s apart) would outlast.
    const client: ServiceBusClient = createServiceBusClient(target, { retryOptions: OWN_RETRY });
    cleanups.push(() => client.close());
    worker = createAppWorker(config, options, { client, db, handlers, logger });
    const running = worker;
    cleanups.push(() => running.stop());
    worker.start();
    // A worker of the wrong kind for its entity (session mode on a plain one, or the reverse) can never receive:
    // a configuration error, named, exit 2, rather than a process that runs and never takes a message.
    // A plain link's answer is definite (refused, or open). A session receiver's refusal comes at once, at attach,
    // but a taken link is seen only when a session is accepted or none is free (the client's time-out): an accept
    // still pending after SESSION_REFUSAL_MS waits for a session, and a refusal after it still stops receiving.
    const mismatch = await worker.entityAnswer(
      config.maxConcurrentSessions > 0 ? SESSION_REFUSAL_MS : PROBE_TIMEOUT_MS,
    );
    if (mismatch) throw mismatch;
    return {
      worker,
      httpPort: health.port,
      embeddedConnectionString,
      stop: stopAll,
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
}

/**
 * With nothing configured for the database or Service Bus: the local broker and an embedded PostgreSQL, stopped
 * with the app. Otherwise the configured ones, as given.
 */
async function startEmbeddedDefaults(
  config: Config,
  logger: Logger,
  cleanups: (() => Promise<void>)[],
): Promise<{
  connection: DatabaseTarget;
  serviceBus: Exclude<ServiceBusConnection, { kind: "embedded" }>;
  embeddedConnectionString?: string;
}> {
  if (config.serviceBus.kind !== "embedded" && config.database.kind !== "embedded")
    return { connection: config.database, serviceBus: config.serviceBus };
  const { EmbeddedPostgresServer } = await loadDevPackage(EMBEDDED_DEFAULTS);
  const pgServer = await EmbeddedPostgresServer.create();
  cleanups.push(() => pgServer.dispose());
  // Loaded only here: a worker on a real broker never loads the local one.
  const { startEmbeddedBroker } = await import("./embedded-broker.ts");
  const broker: EmbeddedBroker = await startEmbeddedBroker(config.queue);
  cleanups.push(() => broker.stop());
  logger.info("embedded defaults: local broker and embedded PostgreSQL started", {
    // Not "connectionString", which the logger redacts: this one is the local broker's public key.
    localBrokerConnectionString: broker.connectionString,
    postgres: pgServer.url(),
  });
  return {
    connection: { kind: "postgres", url: pgServer.url() },
    serviceBus: { kind: "connection-string", connectionString: broker.connectionString },
    embeddedConnectionString: broker.connectionString,
  };
}

/** Start-up's wait for the database (migrated, or migrating an embedded one) and the queue, with the outage back-off. */
async function waitUntilReachable(
  config: Config,
  options: AppOptions,
  parts: {
    db: Database;
    migrations: Awaited<ReturnType<typeof moduleMigrations>> | undefined;
    target: ServiceBusTarget;
    embedded: boolean;
    logger: Logger;
    startup: Record<string, StartupState>;
  },
): Promise<void> {
  const { db, migrations, target, embedded, logger, startup } = parts;
  await startWhenReachable(
    [
      {
        name: "database",
        attempt: async () => {
          await db.store.ping();
          if (embedded) {
            // The process created this database itself, so it also owns its schema.
            const migrated = await db.store.migrate(migrations);
            if (migrated.applied.length > 0) logger.info("migrations applied", { applied: migrated.applied });
          } else {
            // Schema changes belong to `sbinbox migrate`, run by the deployment with DDL rights; the worker's user
            // has only data rights, so it checks (read-only) and waits, as for any refusal, up to
            // SBINBOX_STARTUP_LIMIT_MS for a migrate that may be running beside it, then exits naming it.
            const pending = await db.store.pendingMigrations(migrations);
            if (pending.length > 0) throw new SchemaNotMigratedError(pending);
          }
        },
        classify: databaseStartupFailure(db.store),
      },
      {
        name: "serviceBus",
        attempt: (signal) => probeQueue(target, config.queue, { timeoutMs: PROBE_TIMEOUT_MS, signal }),
        classify: serviceBusStartupFailure,
      },
    ],
    {
      backoffMinMs: config.outageBackoffMinMs,
      backoffMaxMs: config.outageBackoffMaxMs,
      refusedLimitMs: config.startupLimitMs,
      signal: options.signal,
      logger,
      onState: (step, state) => (startup[step] = state),
    },
  );
}

/** On /readyz while SBINBOX_BENCH_LAYERS_OFF switches layers off, so a probe shows it as well as the log. */
function benchLayersOffReport(config: Config): { benchLayersOff?: string } {
  return config.benchLayersOff.length > 0
    ? { benchLayersOff: [...config.benchLayersOff].sort().join("-") }
    : {};
}

/** The worker with the configuration's settings. */
function createAppWorker(
  config: Config,
  options: AppOptions,
  parts: { client: ServiceBusClient; db: Database; handlers: readonly MessageHandler[]; logger: Logger },
): Worker {
  const { client, db, handlers, logger } = parts;
  const kill = options.kill ?? (() => process.kill(process.pid, "SIGKILL"));
  if (config.benchLayersOff.length > 0) {
    // At error level, which every SBINBOX_LOG_LEVEL shows: a safety behaviour is off (also on /readyz).
    logger.error(
      "SBINBOX_BENCH_LAYERS_OFF is set: worker layers are switched off for a benchmark; never set it in production",
      {
        off: config.benchLayersOff,
        consequence:
          "without the progress monitor a silent link is not noticed (/readyz stays ok); without the settlement " +
          "guard a settlement after a connection drop waits the SDK's 330 s",
      },
    );
  }
  return createWorker({
    client,
    store: db.store,
    handlers,
    queue: config.queue,
    consumer: config.consumer,
    maxConcurrentCalls: config.maxConcurrentCalls,
    sessions: config.maxConcurrentSessions > 0 ? { maxSessions: config.maxConcurrentSessions } : undefined,
    maxAutoLockRenewalMs: config.maxAutoLockRenewalMs,
    lockDurationMs: config.lockDurationMs,
    maxMessageBytes: config.maxMessageBytes,
    batchSize: config.batchSize,
    batchWaitMs: config.batchWaitMs,
    batchMaxInFlight: config.batchMaxInFlight,
    gracePeriodMs: config.gracePeriodMs,
    progress: config.progress,
    claimTimeoutMs: config.claimTimeoutMs,
    sweepIntervalMs: config.sweepIntervalMs,
    retentionMs: config.retentionMs,
    cleanupIntervalMs: config.cleanupIntervalMs,
    cleanupPauseMs: config.cleanupPauseMs,
    cleanupPace: config.cleanupPace,
    cleanupBatchRows: config.cleanupBatchRows,
    outageBackoffMinMs: config.outageBackoffMinMs,
    outageBackoffMaxMs: config.outageBackoffMaxMs,
    probeTimeoutMs: config.databaseTimeouts.probeMs,
    retryPolicy: { ...defaultRetryPolicy, ...config.retry },
    logger,
    ...(config.benchLayersOff.length > 0 ? { benchLayersOff: config.benchLayersOff } : {}),
    beforeSettle: config.faultKillAfterCommit
      ? (message, decision) => {
          if (message.messageId === config.faultKillAfterCommit && decision.outcome === "committed") {
            logger.warn("fault injection: killing the process between commit and complete", {
              messageId: message.messageId,
            });
            kill();
          }
        }
      : undefined,
  });
}
