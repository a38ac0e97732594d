import type { EmbeddedPostgresServer, LocalBroker, QueueSettings } from "sbinbox-dev";
import { exampleModule } from "../example/module.ts";
import type { MigrationResult } from "../inbox/store.ts";
import { openDatabase, type Database } from "./database.ts";
import { loadDevPackage } from "./dev-package.ts";
import { moduleMigrations } from "./handler-module.ts";

export interface LocalStack {
  readonly broker: LocalBroker;
  readonly postgres: EmbeddedPostgresServer;
  /** The database's URL, for worker processes. */
  readonly url: string;
  /** This process's own pool on it. */
  readonly db: Database;
  readonly migrated: MigrationResult;
  /** The queue as the broker serves it. */
  readonly queue: QueueSettings;
}

export interface LocalStackOptions {
  /** The one queue, over the broker's queue defaults. */
  readonly queue: Partial<QueueSettings> & { readonly name: string };
  readonly database: string;
  readonly maxConnections: number;
}

/**
 * What the demo and the chaos run stand on: the local broker with one queue, and an embedded PostgreSQL whose
 * database has the inbox and the example tables. Each piece goes onto `cleanups` as soon as it exists, so a
 * failure part-way still tears down what did start.
 */
export async function startLocalStack(
  options: LocalStackOptions,
  cleanups: (() => Promise<void>)[],
): Promise<LocalStack> {
  const { EmbeddedPostgresServer, LocalBroker, defaultConfig, queueDefaults } = await loadDevPackage(
    "the local stack (demo, chaos run)",
  );
  const queue: QueueSettings = { ...queueDefaults, ...options.queue };
  const config = defaultConfig();
  config.queues = [queue];
  const broker = await LocalBroker.start({ port: 0, config });
  cleanups.push(() => broker.stop());
  const postgres = await EmbeddedPostgresServer.create();
  cleanups.push(() => postgres.dispose());
  const url = await postgres.createDatabase(options.database);
  const db = await openDatabase(
    { kind: "postgres", url },
    { preCheck: true, maxConnections: options.maxConnections },
  );
  cleanups.push(() => db.close());
  // What `sbinbox migrate` does: the inbox's migrations, then the example's tables.
  const migrated = await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
  return { broker, postgres, url, db, migrated, queue };
}

/**
 * The settings that point a `sbinbox worker` process at this stack: the broker, the database and the queue, with
 * the queue's lock duration and delivery count taken from what the broker serves, not stated a second time.
 */
export function localWorkerEnv(stack: LocalStack, consumer: string): Record<string, string> {
  return {
    SBINBOX_SERVICEBUS_CONNECTION_STRING: stack.broker.connectionString,
    SBINBOX_POSTGRES_URL: stack.url,
    SBINBOX_QUEUE: stack.queue.name,
    SBINBOX_CONSUMER: consumer,
    SBINBOX_HTTP_HOST: "127.0.0.1",
    SBINBOX_LOG_LEVEL: "error",
    SBINBOX_GRACE_PERIOD_MS: "5000",
    SBINBOX_QUEUE_LOCK_DURATION_MS: String(stack.queue.lockDurationMs),
    SBINBOX_QUEUE_MAX_DELIVERY_COUNT: String(stack.queue.maxDeliveryCount),
  };
}
