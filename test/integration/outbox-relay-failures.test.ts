import assert from "node:assert/strict";
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import pg from "pg";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import { enqueue } from "../../src/outbox/enqueue.ts";
import { createPostgresOutboxStore, type PostgresOutboxStore } from "../../src/outbox/postgres/store.ts";
import { startRelay, type Relay } from "../../src/outbox/relay.ts";
import { createOutboxSender, type OutboxSender } from "../../src/servicebus/outbox-sender.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const QUEUE = "outbox";

function keyOf(m: ServiceBusReceivedMessage): number {
  const body: unknown = m.body;
  const parsed =
    body instanceof Uint8Array ? (JSON.parse(Buffer.from(body).toString("utf8")) as unknown) : body;
  return (parsed as { k: number }).k;
}

/**
 * The relay after failed sends, on PostgreSQL (NOTIFY wakes it). The broker's failure is real: the SDK sends to a
 * queue the local broker does not have (MessagingEntityNotFound) until the test says the outage is over.
 */
describe("outbox relay after failed sends (real SDK, local broker, PostgreSQL)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));
  let pool: pg.Pool;
  let store: PostgresOutboxStore;
  let relay: Relay | undefined;
  let closeSenders: (() => Promise<void>) | undefined;

  beforeEach(async function () {
    pool = new pg.Pool({ connectionString: await createTestDatabase("outbox failures"), max: 6 });
    store = createPostgresOutboxStore({ pool });
    await store.migrate();
    const receiver = fixture.client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
    await receiver.receiveMessages(100, { maxWaitTimeInMs: 200 }); // left by an earlier test
    await receiver.close();
  });

  afterEach(async function () {
    await relay?.stop();
    relay = undefined;
    await closeSenders?.();
    await store.close();
    await pool.end();
  });

  /** `type` keeps each test's MessageIds apart: the queue's duplicate detection outlives a test. */
  async function commit(keys: number[], type = "N"): Promise<void> {
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await enqueue(
        client,
        keys.map((k) => ({ type, key: String(k), body: { k } })),
      );
      await client.query("COMMIT");
    } finally {
      client.release();
    }
  }

  /** The real sender, sending to a missing queue while `down()` says so; counts its calls. */
  function outageSender(down: () => boolean): OutboxSender & { calls: number } {
    const good = createOutboxSender({ client: fixture.client, queue: QUEUE });
    const bad = createOutboxSender({ client: fixture.client, queue: "no-such-queue" });
    closeSenders = async () => {
      await good.close();
      await bad.close();
    };
    const s = {
      queue: QUEUE,
      calls: 0,
      send: (rows: Parameters<OutboxSender["send"]>[0]) => {
        s.calls += 1;
        return (down() ? bad : good).send(rows);
      },
      close: () => Promise.resolve(),
    };
    return s;
  }

  async function receiveAll(expected: number): Promise<number[]> {
    const receiver = fixture.client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
    const got: number[] = [];
    try {
      const deadline = Date.now() + 10_000;
      while (got.length < expected && Date.now() < deadline) {
        const batch = await receiver.receiveMessages(expected - got.length, { maxWaitTimeInMs: 1_000 });
        got.push(...batch.map(keyOf));
      }
      // Anything more would be a copy the broker failed to drop.
      got.push(...(await receiver.receiveMessages(10, { maxWaitTimeInMs: 300 })).map(keyOf));
    } finally {
      await receiver.close();
    }
    return got;
  }

  it("sends every row committed during a broker outage longer than the duplicate window, once", async function () {
    let down = true;
    const sender = outageSender(() => down);
    relay = await startRelay({
      store,
      sender,
      duplicateWindowMs: 5_000,
      windowMarginMs: 1_000,
      leaseMs: 1_000,
      pollIntervalMs: 500,
      retryDelayMs: 400,
      retentionMs: 0,
    });
    const keys: number[] = [];
    const outageEnds = Date.now() + 7_000; // longer than the 5 s window
    for (let k = 1; Date.now() < outageEnds; k++) {
      await commit([k]);
      keys.push(k);
      await new Promise((r) => setTimeout(r, 200));
    }
    const callsDuringOutage = sender.calls;
    down = false;
    const r = relay;
    await waitUntil(() => r.counters.sent === keys.length, `all ${keys.length} rows sent`, 20_000);
    assert.deepEqual(await receiveAll(keys.length), keys);
    // The back-off held: commits (each a NOTIFY) did not make the relay try again at once.
    assert.ok(callsDuringOutage < 20, `${callsDuringOutage} sends in a 7 s outage, back-off 0.4 s doubling`);
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "Outbox" WHERE "SentUtc" IS NULL`,
    );
    assert.equal(rows[0]!.n, 0);
  });

  it("keeps Id order when rows are committed during the back-off after a failed send", async function () {
    let failures = 1;
    const sender = outageSender(() => failures-- > 0);
    await commit([1, 2, 3], "Ordered");
    relay = await startRelay({ store, sender, retryDelayMs: 2_000, pollIntervalMs: 20_000 });
    await waitUntil(() => sender.calls >= 1 && relay!.counters.failedSends === 1, "the failed send");
    await commit([4], "Ordered"); // its NOTIFY arrives while rows 1-3 wait out the back-off
    const r = relay;
    await waitUntil(() => r.counters.sent === 4, "all four sent", 20_000);
    assert.deepEqual(await receiveAll(4), [1, 2, 3, 4]);
  });
});

describe("outbox relay: LISTEN after a PostgreSQL restart (own server)", function () {
  this.timeout(90_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));

  it("listens again on its own back-off and sends a commit made after the restart without waiting for the poll", async function () {
    const server = await EmbeddedPostgresServer.create();
    const url = await server.createDatabase("relisten");
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    pool.on("error", () => undefined); // idle clients die with the server
    const store = createPostgresOutboxStore({ url });
    await store.migrate();
    const errors: string[] = [];
    const sender = createOutboxSender({ client: fixture.client, queue: QUEUE });
    // The store as the relay sees it, counting each LISTEN that holds: the test waits for that, not for a time.
    let listens = 0;
    const counted = new Proxy(store, {
      get(target, key) {
        if (key === "listen") {
          return async (...args: Parameters<PostgresOutboxStore["listen"]>) => {
            const stop = await target.listen(...args);
            listens += 1;
            return stop;
          };
        }
        const value: unknown = Reflect.get(target, key, target);
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const relay = await startRelay({
      store: counted,
      sender,
      pollIntervalMs: 200_000, // only NOTIFY can make it send within the test
      onError: (_error, during) => errors.push(during),
    });
    const commit = async (key: string): Promise<void> => {
      const client = await pool.connect();
      try {
        await client.query("BEGIN");
        await enqueue(client, { type: "Relisten", key, body: {} });
        await client.query("COMMIT");
      } finally {
        client.release();
      }
    };
    try {
      await commit("1");
      await waitUntil(() => relay.counters.sent === 1, "the first row, by NOTIFY");
      await server.stop();
      await waitUntil(() => errors.includes("listen"), "the LISTEN connection lost", 20_000);
      // The lost connection and four failed LISTENs: the back-off has grown to 1.6 s (100 ms, doubling).
      await waitUntil(
        () => errors.filter((during) => during === "listen").length >= 5,
        "a few failed LISTENs",
        20_000,
      );
      assert.equal(listens, 1, "no LISTEN holds while the server is down");
      await server.start();
      // LISTEN comes back on its own back-off (at most 5 s); only then can a NOTIFY wake the relay.
      await waitUntil(() => listens === 2, "LISTEN holds again after the restart", 20_000);
      await commit("2");
      await waitUntil(() => relay.counters.sent === 2, "the second row, by NOTIFY after the restart", 10_000);
    } finally {
      await relay.stop();
      await sender.close();
      await store.close();
      await pool.end();
      await server.dispose();
    }
  });
});
