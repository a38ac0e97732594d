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
  /**
   * Runs `count` upstream transactions, every `rollbackEvery`-th rolled back. A transaction that fails (the
   * database went away) is not retried: whether it committed is read back from the database by `outcome`.
   */
  run(count: number): Promise<{ failed: number }>;
  /**
   * What the upstream database holds, the only truth after faults: events whose transfer row committed (each must
   * have exactly one downstream effect) and every other event attempted (none may have any).
   */
  outcome(): Promise<{ committed: PublishEvent[]; notCommitted: PublishEvent[]; rolledBack: number }>;
  /** Starts a relay process; `kill` ends one with SIGKILL, as a crash would. */
  startRelay(): Promise<ChildProcess>;
  readonly relays: ChildProcess[];
  /** Relay processes that ended, and how: a crash is an exit code, a kill a signal. */
  readonly exits: { code: number | null; signal: NodeJS.Signals | null; at: number }[];
  /** Rows committed to the outbox and not yet marked sent. */
  unsent(): Promise<number>;
  /**
   * Unsent rows first tried longer ago than `windowMs` (the duplicate window less the relay's margin): stale, which
   * no relay sends again until an operator decides (docs/outbox.md). The same test as the relay's status statement.
   */
  stale(
    windowMs: number,
  ): Promise<{ id: string; messageId: string; attempts: number; firstTriedAgoMs: number }[]>;
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
  const attempted: PublishEvent[] = [];
  let rolledBack = 0;
  const relays: ChildProcess[] = [];
  const exits: { code: number | null; signal: NodeJS.Signals | null; at: number }[] = [];
  let next = 0;

  return {
    relays,
    exits,
    async run(count) {
      let failed = 0;
      for (let i = 0; i < count; i++, next++) {
        const event = demoEvent(`${options.runId}-up`, next);
        const body = event.body as { accountId: string; amount: number };
        const rollback = next % options.rollbackEvery === options.rollbackEvery - 1;
        attempted.push(event);
        let client: pg.PoolClient | undefined;
        try {
          client = await pool.connect();
          await client.query("BEGIN");
          await client.query(
            "INSERT INTO transfers (id, account_id, amount, message_id) VALUES ($1, $2, $3, $4)",
            [event.key, body.accountId, body.amount, deriveMessageId(event.type, event.key)],
          );
          await enqueue(client, event);
          await client.query(rollback ? "ROLLBACK" : "COMMIT");
          if (rollback) rolledBack += 1;
          client.release();
        } catch (error) {
          failed += 1;
          client?.release(error instanceof Error ? error : true);
          await new Promise((r) => setTimeout(r, 200)); // the database is away; try the next one a bit later
        }
      }
      return { failed };
    },
    async outcome() {
      const { rows } = await pool.query<{ id: string }>("SELECT id FROM transfers");
      const done = new Set(rows.map((r) => r.id));
      return {
        committed: attempted.filter((e) => done.has(e.key)),
        notCommitted: attempted.filter((e) => !done.has(e.key)),
        rolledBack,
      };
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
          // Short, so that a relay killed mid-send frees its rows quickly; a send must fit inside the lease.
          SBINBOX_OUTBOX_LEASE_MS: "4000",
          SBINBOX_OUTBOX_SEND_TIMEOUT_MS: "3000",
          SBINBOX_OUTBOX_POLL_INTERVAL_MS: "200",
          ...options.relayEnv,
        },
        stdio: ["ignore", "ignore", "inherit"],
      });
      relays.push(child);
      child.on("exit", (code, signal) => exits.push({ code, signal, at: Date.now() }));
      return child;
    },
    async unsent() {
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "Outbox" WHERE "SentUtc" IS NULL AND "SetAsideUtc" IS NULL`,
      );
      return rows[0]!.n;
    },
    async stale(windowMs) {
      const { rows } = await pool.query<{
        id: string;
        messageId: string;
        attempts: number;
        firstTriedAgoMs: number;
      }>(
        `SELECT "Id"::text AS id, "MessageId" AS "messageId", "Attempts" AS attempts,
           (extract(epoch FROM now() - "FirstAttemptUtc") * 1000)::int AS "firstTriedAgoMs"
         FROM "Outbox" WHERE "SentUtc" IS NULL AND "SetAsideUtc" IS NULL
           AND "FirstAttemptUtc" <= now() - make_interval(secs => $1::bigint / 1000.0)
         ORDER BY "Id"`,
        [windowMs],
      );
      return rows;
    },
    async close() {
      for (const r of relays) if (r.exitCode === null && r.signalCode === null) r.kill("SIGKILL");
      await pool.end();
    },
  };
}
