import type { Config } from "../config/load.ts";
import type { MessageHandler } from "../domain/handler.ts";
import { startHealthServer, type HealthServer, type ReadinessReport } from "../http/health.ts";
import { createServiceBusClient, type ServiceBusClient } from "../servicebus/client.ts";
import { createLogger, type Logger } from "../telemetry/logger.ts";
import { createWorker, type Worker } from "../worker/worker.ts";
import { openDatabase, type Database } from "./database.ts";
import { loadHandlerModule, moduleMigrations, SchemaNotMigratedError } from "./handler-module.ts";
import type { EmbeddedBroker } from "./embedded-broker.ts";

export interface AppOptions {
  /** The handlers to run (their tables already migrated); the module SBINBOX_HANDLERS names when omitted. */
  readonly handlers?: readonly MessageHandler[];
  readonly logger?: Logger;
  /** Called instead of killing the process when the fault-injection switch fires (tests). */
  readonly kill?: () => void;
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
  const health: HealthServer = await startHealthServer({
    port: config.port,
    host: config.httpHost,
    readiness: async (): Promise<ReadinessReport> =>
      worker ? { ...(await worker.readiness()) } : { ready: false, status: "starting" },
  });
  cleanups.push(() => health.close());
  logger.info("http listening", { port: health.port, host: config.httpHost });
  try {
    let embeddedConnectionString: string | undefined;
    let connection = config.database;
    let serviceBus = config.serviceBus;
    const embedded = serviceBus.kind === "embedded" || connection.kind === "embedded";
    if (serviceBus.kind === "embedded" || connection.kind === "embedded") {
      const { EmbeddedPostgresServer } = await import("../embedded/postgres.ts");
      const pgServer = await EmbeddedPostgresServer.create();
      cleanups.push(() => pgServer.dispose());
      connection = { kind: "postgres", url: pgServer.url() };
      // Loaded only here: a worker on a real broker never loads the local one.
      const { startEmbeddedBroker } = await import("./embedded-broker.ts");
      const broker: EmbeddedBroker = await startEmbeddedBroker(config.queue);
      cleanups.push(() => broker.stop());
      embeddedConnectionString = broker.connectionString;
      serviceBus = { kind: "connection-string", connectionString: broker.connectionString };
      logger.info("embedded defaults: local broker and embedded PostgreSQL started", {
        connectionString: broker.connectionString,
        postgres: pgServer.url(),
      });
    }
    const db: Database = await openDatabase(connection, {
      preCheck: config.precheck,
      inboxSchema: config.inboxSchema,
      maxConnections: config.maxConcurrentCalls + 4,
    });
    cleanups.push(() => db.close());
    const module = options.handlers ? undefined : await loadHandlerModule(config.handlersModule);
    const migrations = module ? await moduleMigrations(module, db.dialect) : undefined;
    if (embedded) {
      // The process created this database itself, so it also owns its schema.
      const migrated = await db.store.migrate(migrations);
      if (migrated.applied.length > 0) logger.info("migrations applied", { applied: migrated.applied });
    } else {
      // Schema changes belong to `sbinbox migrate`, run by the deployment with DDL rights; the worker's user has
      // only data rights, so it checks (read-only) and refuses to start on a schema it would fail against.
      const pending = await db.store.pendingMigrations(migrations);
      if (pending.length > 0) throw new SchemaNotMigratedError(pending);
    }
    const handlers = options.handlers ?? (await module!.handlers());

    const client: ServiceBusClient = createServiceBusClient(
      serviceBus.kind === "namespace"
        ? { fullyQualifiedNamespace: serviceBus.fullyQualifiedNamespace }
        : { connectionString: (serviceBus as { connectionString: string }).connectionString },
    );
    cleanups.push(() => client.close());
    const kill = options.kill ?? (() => process.kill(process.pid, "SIGKILL"));
    worker = createWorker({
      client,
      store: db.store,
      handlers,
      queue: config.queue,
      consumer: config.consumer,
      maxConcurrentCalls: config.maxConcurrentCalls,
      maxAutoLockRenewalMs: config.maxAutoLockRenewalMs,
      maxMessageBytes: config.maxMessageBytes,
      gracePeriodMs: config.gracePeriodMs,
      claimTimeoutMs: config.claimTimeoutMs,
      sweepIntervalMs: config.sweepIntervalMs,
      retentionMs: config.retentionMs,
      cleanupIntervalMs: config.cleanupIntervalMs,
      outageBackoffMinMs: config.outageBackoffMinMs,
      outageBackoffMaxMs: config.outageBackoffMaxMs,
      logger,
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
    const running = worker;
    cleanups.push(() => running.stop());
    worker.start();
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
