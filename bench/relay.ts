// `node bench/relay.ts` (and the last part of `npm run bench`): the outbox relay's throughput, from committed outbox
// rows to the broker, beside the direct publisher's rate on the same broker; and the latency from an upstream
// commit (business row + outbox row) to the downstream worker's committed effect, through relay, broker and inbox.
// A benchmark, not a test: it prints figures and ratios.
import { fileURLToPath } from "node:url";
import { ServiceBusClient } from "@azure/service-bus";
import pg from "pg";
import { openDatabase } from "../src/app/database.ts";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { accountCreditedHandler } from "../src/example/accounts.ts";
import { moduleMigrations } from "../src/app/handler-module.ts";
import { exampleModule } from "../src/example/module.ts";
import { demoEvent } from "../src/example/demo-events.ts";
import type { InboxStore } from "../src/inbox/store.ts";
import { LocalBroker } from "../src/localbroker/broker.ts";
import { defaultConfig, queueDefaults } from "../src/localbroker/config.ts";
import { enqueue } from "../src/outbox/enqueue.ts";
import { createPostgresOutboxStore } from "../src/outbox/postgres/store.ts";
import { startRelay } from "../src/outbox/relay.ts";
import { deriveMessageId } from "../src/servicebus/message-id.ts";
import { createOutboxSender } from "../src/servicebus/outbox-sender.ts";
import { createPublisher } from "../src/servicebus/publisher.ts";
import { createWorker } from "../src/worker/worker.ts";
import { formatTable } from "./common.ts";

const MESSAGES = Number(process.env.SBINBOX_BENCH_MESSAGES ?? 2000);
const LATENCY_SAMPLES = Number(process.env.SBINBOX_BENCH_LATENCY_SAMPLES ?? 300);
const QUEUES = ["relay-publisher", "relay-outbox", "relay-e2e"] as const;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function waitFor(condition: () => boolean, what: string, timeoutMs = 300_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`bench: timed out waiting for ${what}`);
    await sleep(2);
  }
}

let serial = 0;
const events = (n: number) => {
  const run = `r${++serial}-${process.pid}`;
  return Array.from({ length: n }, (_, i) => demoEvent(run, i));
};

/** Runs the relay figures on an embedded PostgreSQL (given, or its own) and an in-process broker; returns lines. */
export async function relayBench(server?: EmbeddedPostgresServer): Promise<string[]> {
  const ownServer = server === undefined;
  const pgServer = server ?? (await EmbeddedPostgresServer.create());
  const config = defaultConfig();
  config.queues = QUEUES.map((name) => ({ ...queueDefaults, name, lockDurationMs: 60_000 }));
  const broker = await LocalBroker.start({ port: 0, host: "127.0.0.1", config });
  const client = new ServiceBusClient(broker.connectionString);
  const upstreamPool = new pg.Pool({
    connectionString: await pgServer.createDatabase("bench_upstream"),
    max: 4,
  });
  const store = createPostgresOutboxStore({ pool: upstreamPool });
  try {
    await store.migrate();

    // The direct publisher: batches of 100, as the demo publishes.
    const publisher = createPublisher({ client, queue: QUEUES[0] });
    await publisher.publishBatch(events(100)); // the send link, outside the timing
    const direct = events(MESSAGES);
    let t = performance.now();
    for (let i = 0; i < direct.length; i += 100) await publisher.publishBatch(direct.slice(i, i + 100));
    const publisherRate = direct.length / ((performance.now() - t) / 1000);
    await publisher.close();

    // The relay: rows committed beforehand (transactions of 100), then drained in batches of 100.
    const rows = events(MESSAGES);
    for (let i = 0; i < rows.length; i += 100) {
      const c = await upstreamPool.connect();
      await c.query("BEGIN");
      await enqueue(c, rows.slice(i, i + 100));
      await c.query("COMMIT");
      c.release();
    }
    const sender = createOutboxSender({ client, queue: QUEUES[1] });
    t = performance.now();
    const relay = await startRelay({ store, sender, batchSize: 100, pollIntervalMs: 50 });
    await waitFor(() => relay.counters.sent >= rows.length, "the relay to send every row");
    const relayRate = rows.length / ((performance.now() - t) / 1000);
    await relay.stop();
    await sender.close();

    // Upstream commit -> downstream committed effect: a worker on its own database, the relay woken by NOTIFY.
    const downstream = await openDatabase(
      { kind: "postgres", url: await pgServer.createDatabase("bench_downstream") },
      { preCheck: true, maxConnections: 12 },
    );
    await downstream.store.migrate(await moduleMigrations(exampleModule, downstream.dialect));
    const committedAt = new Map<string, number>();
    const latencies: number[] = [];
    const inner = downstream.store;
    const observed = new Proxy(inner, {
      get(target, prop) {
        if (prop === "process") {
          return async (...args: Parameters<InboxStore["process"]>) => {
            const outcome = await target.process(...args);
            const at = committedAt.get(args[0].messageId);
            if (outcome.kind === "committed" && at !== undefined) latencies.push(performance.now() - at);
            return outcome;
          };
        }
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const worker = createWorker({
      client,
      store: observed,
      handlers: [accountCreditedHandler()],
      queue: QUEUES[2],
      consumer: "bench",
      maxConcurrentCalls: 8,
      sweepIntervalMs: 0,
    });
    worker.start();
    const e2eSender = createOutboxSender({ client, queue: QUEUES[2] });
    const e2eRelay = await startRelay({ store, sender: e2eSender, batchSize: 100, pollIntervalMs: 1_000 });
    await sleep(500); // links and the LISTEN connection attach
    for (const e of events(LATENCY_SAMPLES)) {
      const c = await upstreamPool.connect();
      await c.query("BEGIN");
      await enqueue(c, e);
      await c.query("COMMIT");
      c.release();
      committedAt.set(deriveMessageId(e.type, e.key), performance.now());
      await sleep(10);
    }
    await waitFor(() => latencies.length >= LATENCY_SAMPLES, "every latency sample");
    await e2eRelay.stop();
    await e2eSender.close();
    await worker.stop();
    await downstream.close();
    const sorted = latencies.sort((a, b) => a - b);
    const p = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor((q / 100) * sorted.length))]!;

    return [
      "",
      "outbox relay: committed outbox rows -> local broker (in process), beside the direct publisher",
      ...formatTable(
        ["rows", "publisher/s", "relay/s", "relay/publisher", "commit->effect p50 ms", "p99 ms"],
        [
          [
            String(MESSAGES),
            publisherRate.toFixed(0),
            relayRate.toFixed(0),
            (relayRate / publisherRate).toFixed(2),
            p(50).toFixed(1),
            p(99).toFixed(1),
          ],
        ],
      ),
      `latency: ${LATENCY_SAMPLES} upstream transactions, one every ~10 ms, relay woken by NOTIFY, worker at 8`,
    ];
  } finally {
    await store.close();
    await upstreamPool.end().catch(() => undefined);
    await client.close();
    await broker.stop();
    if (ownServer) await pgServer.dispose();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  process.stdout.write(`${(await relayBench()).join("\n")}\n`);
  setTimeout(() => process.exit(0), 1_000).unref();
}
