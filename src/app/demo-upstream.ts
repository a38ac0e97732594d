import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { freePort } from "../embedded/free-port.ts";
import { demoEvent } from "../example/demo-events.ts";
import { enqueue } from "../outbox/enqueue.ts";
import { createPostgresOutboxStore } from "../outbox/postgres/store.ts";
import { deriveMessageId } from "../servicebus/message-id.ts";
import type { PublishEvent } from "../servicebus/publisher.ts";
import type { LocalStack } from "./local-stack.ts";

const BIN = fileURLToPath(new URL("../../bin/sbinbox.js", import.meta.url));

/**
 * The upstream half of the demo and the chaos run: a service with its own database (a second database on the
 * embedded server) that writes a transfer row and its AccountCredited event in one transaction, some of which roll
 * back, and `sbinbox relay` processes that send the outbox to the worker's queue.
 */
export interface Upstream {
  /** Events whose transaction committed: each must have exactly one downstream effect. */
  readonly committed: PublishEvent[];
  /** Events whose transaction rolled back: none may have any. */
  readonly rolledBack: PublishEvent[];
  /** Runs `count` upstream transactions, every `rollbackEvery`-th rolled back. */
  run(count: number): Promise<void>;
  /** Starts a relay process; `kill` ends one with SIGKILL, as a crash would. */
  startRelay(): Promise<ChildProcess>;
  readonly relays: ChildProcess[];
  /** Rows committed to the outbox and not yet marked sent. */
  unsent(): Promise<number>;
  /** Committed transfers (the upstream's own rows). */
  transfers(): Promise<number>;
  close(): Promise<void>;
}

export interface UpstreamOptions {
  readonly runId: string;
  readonly rollbackEvery: number;
  /** Settings of the relay processes beyond the stack's (lease, poll). */
  readonly relayEnv?: Record<string, string>;
  readonly env: NodeJS.ProcessEnv;
}

export async function startUpstream(stack: LocalStack, options: UpstreamOptions): Promise<Upstream> {
  const url = await stack.postgres.createDatabase("sbinbox_upstream");
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on("error", () => undefined);
  const store = createPostgresOutboxStore({ pool });
  await store.migrate();
  await store.close();
  await pool.query(`CREATE TABLE IF NOT EXISTS transfers (
    id text PRIMARY KEY, account_id text NOT NULL, amount integer NOT NULL, message_id text NOT NULL)`);
  const committed: PublishEvent[] = [];
  const rolledBack: PublishEvent[] = [];
  const relays: ChildProcess[] = [];
  let next = 0;

  return {
    committed,
    rolledBack,
    relays,
    async run(count) {
      const client = await pool.connect();
      try {
        for (let i = 0; i < count; i++, next++) {
          const event = demoEvent(`${options.runId}-up`, next);
          const body = event.body as { accountId: string; amount: number };
          const rollback = next % options.rollbackEvery === options.rollbackEvery - 1;
          await client.query("BEGIN");
          await client.query(
            "INSERT INTO transfers (id, account_id, amount, message_id) VALUES ($1, $2, $3, $4)",
            [event.key, body.accountId, body.amount, deriveMessageId(event.type, event.key)],
          );
          await enqueue(client, event);
          await client.query(rollback ? "ROLLBACK" : "COMMIT");
          (rollback ? rolledBack : committed).push(event);
        }
      } finally {
        client.release();
      }
    },
    async startRelay() {
      const port = await freePort();
      const child = spawn(process.execPath, [BIN, "relay"], {
        env: {
          ...options.env,
          SBINBOX_SERVICEBUS_CONNECTION_STRING: stack.broker.connectionString,
          SBINBOX_POSTGRES_URL: url,
          SBINBOX_QUEUE: stack.queue.name,
          SBINBOX_HTTP_HOST: "127.0.0.1",
          SBINBOX_LOG_LEVEL: "error",
          PORT: String(port),
          SBINBOX_QUEUE_DUPLICATE_WINDOW_MS: String(stack.queue.duplicateDetectionWindowMs),
          SBINBOX_OUTBOX_LEASE_MS: "2000",
          SBINBOX_OUTBOX_POLL_INTERVAL_MS: "200",
          ...options.relayEnv,
        },
        stdio: ["ignore", "ignore", "inherit"],
      });
      relays.push(child);
      return child;
    },
    async unsent() {
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "Outbox" WHERE "SentUtc" IS NULL AND "SetAsideUtc" IS NULL`,
      );
      return rows[0]!.n;
    },
    async transfers() {
      const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM transfers`);
      return rows[0]!.n;
    },
    async close() {
      for (const r of relays) if (r.exitCode === null && r.signalCode === null) r.kill("SIGKILL");
      await pool.end();
    },
  };
}
