// The rows the worker is set against, each a bare loop in the bench process: the database (the worker's
// transaction as bare SQL), the broker (receive-and-complete through the SDK, no database), the seeds' naive
// handler; their CPU per message makes the floor of the worker's CPU.
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import pg from "pg";
import { accountSql } from "../../src/example/accounts.ts";
import { statements } from "../../src/inbox/postgres/statements.ts";
import { messageKey } from "../../src/inbox/message-key.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import type { PublishEvent } from "../../src/servicebus/publisher.ts";
import { inBareTransaction } from "../common.ts";
import { CONSUMER, QUEUE, freshEvents, prefill, settledQueue, type Drain, type Harness } from "./harness.ts";
import { perMessage } from "./proxy.ts";

export const NAIVE_TABLES = `
CREATE TABLE naive_inbox (id bigserial PRIMARY KEY, message_id varchar(128) NOT NULL,
  consumer varchar(200) NOT NULL, received_utc timestamptz NOT NULL DEFAULT now());
CREATE INDEX ix_naive_inbox ON naive_inbox (message_id, consumer);`;

/** `op` over `items` in `c` lanes; rate, CPU per item and the proxy's counts per item. */
async function lanes<T>(
  h: Harness,
  c: number,
  items: readonly T[],
  op: (item: T) => Promise<void>,
): Promise<Drain> {
  let next = 0;
  const before = await h.proxy.counts();
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      for (let i = next++; i < items.length; i = next++) await op(items[i]!);
    }),
  );
  const rate = items.length / ((performance.now() - started) / 1000);
  const used = process.cpuUsage(cpu);
  const counts = perMessage(before, await h.proxy.counts(), items.length);
  return { rate, cpuUs: (used.user + used.system) / items.length, ...counts };
}

/**
 * The worker's transaction for a fresh message as bare SQL on a pool like the worker's: BEGIN sent with the marker
 * insert in one write (pg's pipeline mode, as the worker's pool does), the two effect statements, COMMIT: four
 * round trips, what the worker sends for this handler. `sixRoundTrips` is the same before issue 12: a pre-check
 * read, then BEGIN, marker, effect and COMMIT each in turn.
 */
export async function databaseCeiling(
  h: Harness,
  c: number,
  count: number,
  sixRoundTrips = false,
): Promise<Drain> {
  const pool = new pg.Pool({ connectionString: h.url, max: c, pipeline: !sixRoundTrips });
  // The markers name the consumer by its Id: registered once, as the worker does before its first message.
  await pool.query(statements.registerConsumer, [CONSUMER]);
  const events = freshEvents(count);
  const one = async (e: PublishEvent): Promise<void> => {
    const id = deriveMessageId(e.type, e.key);
    const body = e.body as { accountId: string; amount: number };
    if (sixRoundTrips) {
      const seen = await pool.query(statements.isProcessed, [messageKey(id), CONSUMER]);
      if (seen.rows.length > 0) throw new Error("bench: unexpected duplicate");
      await inBareTransaction(pool, async (client) => {
        await client.query(statements.insertProcessedMarker, [messageKey(id), CONSUMER]);
        await client.query(accountSql.insertCredit.postgres, [id, body.accountId, body.amount]);
        await client.query(accountSql.addToBalance.postgres, [body.accountId, body.amount]);
      });
      return;
    }
    const client = await pool.connect();
    try {
      await Promise.all([
        client.query("BEGIN"),
        client.query(statements.insertProcessedMarker, [messageKey(id), CONSUMER]),
      ]);
      await client.query(accountSql.insertCredit.postgres, [id, body.accountId, body.amount]);
      await client.query(accountSql.addToBalance.postgres, [body.accountId, body.amount]);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
  };
  const result = await lanes(h, c, events, one);
  await pool.end();
  return result;
}

/** Receive-and-complete through the SDK at `c`, with `handle` before each complete; from the first delivery. */
export async function receiveLoop(
  h: Harness,
  c: number,
  count: number,
  handle: (m: ServiceBusReceivedMessage) => Promise<void>,
): Promise<Drain> {
  await prefill(h, freshEvents(count));
  const receiver = h.client.createReceiver(QUEUE, { receiveMode: "peekLock", skipParsingBodyAsJson: true });
  const before = await h.proxy.counts();
  let done = 0;
  let first = 0;
  let cpu = process.cpuUsage();
  let finished!: () => void;
  const all = new Promise<void>((resolve) => (finished = resolve));
  const subscription = receiver.subscribe(
    {
      processMessage: async (m) => {
        if (first === 0) {
          first = performance.now();
          cpu = process.cpuUsage();
        }
        await handle(m);
        await receiver.completeMessage(m);
        done += 1;
        if (done === count) finished();
      },
      processError: (args) => Promise.reject(args.error),
    },
    { autoCompleteMessages: false, maxConcurrentCalls: c },
  );
  await all;
  const used = process.cpuUsage(cpu);
  const rate = count / ((performance.now() - first) / 1000);
  await subscription.close();
  await receiver.close();
  await settledQueue(h);
  const counts = perMessage(before, await h.proxy.counts(), count);
  return { rate, cpuUs: (used.user + used.system) / count, ...counts };
}

/** The seeds' first handler: check the inbox, then insert marker and effect; no unique index to stop a race. */
export async function naive(h: Harness, c: number, count: number): Promise<Drain> {
  const pool = new pg.Pool({ connectionString: h.url, max: c + 4 });
  const result = await receiveLoop(h, c, count, async (m) => {
    const id = String(m.messageId);
    const body = JSON.parse(Buffer.from(m.body as Uint8Array).toString("utf8")) as {
      accountId: string;
      amount: number;
    };
    const seen = await pool.query("SELECT 1 FROM naive_inbox WHERE message_id = $1 AND consumer = $2", [
      id,
      "naive",
    ]);
    if (seen.rows.length > 0) return;
    await inBareTransaction(pool, async (client) => {
      await client.query(accountSql.insertCredit.postgres, [id, body.accountId, body.amount]);
      await client.query(accountSql.addToBalance.postgres, [body.accountId, body.amount]);
      await client.query("INSERT INTO naive_inbox (message_id, consumer) VALUES ($1, $2)", [id, "naive"]);
    });
  });
  await pool.end();
  return result;
}

export interface Floor {
  readonly receiveUs: number;
  readonly databaseUs: number;
  readonly totalUs: number;
}

/**
 * The floor of the worker's CPU per message (the measure): a bare subscribe() + complete loop plus a bare
 * pg loop of the same statements (the four-round-trip transaction), each's CPU per message in this process, at
 * the concurrency of a `sbinbox worker` (16).
 */
export async function floor(h: Harness, count: number, c = 16): Promise<Floor> {
  const receive = await receiveLoop(h, c, count, () => Promise.resolve());
  const database = await databaseCeiling(h, c, count);
  return { receiveUs: receive.cpuUs, databaseUs: database.cpuUs, totalUs: receive.cpuUs + database.cpuUs };
}

/** Mean round trip of `SELECT 1` one after another, straight and through the proxy: what the proxy adds. */
export async function proxyCost(h: Harness, n = 500): Promise<{ direct: number; proxied: number }> {
  const time = async (url: string) => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    for (let i = 0; i < 50; i += 1) await client.query("SELECT 1");
    const started = performance.now();
    for (let i = 0; i < n; i += 1) await client.query("SELECT 1");
    const ms = (performance.now() - started) / n;
    await client.end();
    return ms;
  };
  return { direct: await time(h.directUrl), proxied: await time(h.url) };
}
