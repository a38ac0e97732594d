import { EmbeddedPostgresServer } from "../embedded/postgres.ts";
import { ensureAccountTables } from "../example/accounts.ts";
import type { MigrationResult } from "../inbox/store.ts";
import { LocalBroker } from "../localbroker/broker.ts";
import { defaultConfig, queueDefaults, type QueueSettings } from "../localbroker/config.ts";
import { openDatabase, type Database } from "./database.ts";

export interface LocalStack {
  readonly broker: LocalBroker;
  readonly postgres: EmbeddedPostgresServer;
  /** The database's URL, for worker processes. */
  readonly url: string;
  /** This process's own pool on it. */
  readonly db: Database;
  readonly migrated: MigrationResult;
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
  const config = defaultConfig();
  config.queues = [{ ...queueDefaults, ...options.queue }];
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
  const migrated = await db.store.migrate();
  await ensureAccountTables(db.sql);
  return { broker, postgres, url, db, migrated };
}
