import type { ServiceBusClient } from "@azure/service-bus";
import { openDatabase, type Database } from "../../src/app/database.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { moduleMigrations } from "../../src/app/handler-module.ts";
import { accountSql, exampleHandlers } from "../../src/example/index.ts";
import { exampleModule } from "../../src/example/module.ts";
import { createWorker, type Worker, type WorkerOptions } from "../../src/worker/worker.ts";
import { createTestDatabase } from "./postgres.ts";

/** A fresh database with the inbox and the example tables, and the worker's own pool on it. */
export async function exampleDatabase(label: string, url?: string): Promise<Database & { url: string }> {
  const dbUrl = url ?? (await createTestDatabase(label));
  const db = await openDatabase({ kind: "postgres", url: dbUrl }, { preCheck: true, maxConnections: 20 });
  await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
  return Object.assign(db, { url: dbUrl });
}

/** Credit rows per MessageId: the effects the example handler applied. */
export async function creditsPerMessage(db: Database): Promise<Map<string, number>> {
  const { rows } = await db.sql.query<{ messageId: string; n: number }>(
    accountSql.creditsPerMessage[db.dialect],
  );
  return new Map(rows.map((r) => [r.messageId, Number(r.n)]));
}

export async function countCredits(db: Database): Promise<number> {
  const { rows } = await db.sql.query<{ n: number }>(accountSql.countCredits[db.dialect]);
  return Number(rows[0]?.n ?? 0);
}

export interface TestWorkerOptions extends Partial<Omit<WorkerOptions, "client" | "store">> {
  readonly client: ServiceBusClient;
  readonly db: Database;
  readonly handlers?: readonly MessageHandler[];
}

/**
 * A started worker on the given broker client and database; the test stops it. One transaction per message unless
 * the test gives `batchSize` (the worker's own default, "auto", batches keyed handlers: given as undefined, it
 * applies), so that a test written for the single path runs it whatever the timing.
 */
export function startTestWorker(options: TestWorkerOptions): Worker {
  const worker = createWorker({
    queue: "sbinbox",
    consumer: "test",
    maxConcurrentCalls: 8,
    batchSize: 1,
    gracePeriodMs: 5_000,
    outageBackoffMinMs: 100,
    outageBackoffMaxMs: 1_000,
    sweepIntervalMs: 0,
    ...options,
    handlers: options.handlers ?? exampleHandlers(),
    store: options.db.store,
  });
  worker.start();
  return worker;
}
