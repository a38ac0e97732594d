import assert from "node:assert/strict";
import { ServiceBusClient, type ServiceBusReceivedMessage } from "@azure/service-bus";
import pg from "pg";
import { enqueue } from "../../src/outbox/enqueue.ts";
import { createPostgresOutboxStore, type PostgresOutboxStore } from "../../src/outbox/postgres/store.ts";
import { startRelay, type Relay } from "../../src/outbox/relay.ts";
import { createOutboxSender } from "../../src/servicebus/outbox-sender.ts";
import { Metric } from "../../src/telemetry/names.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const QUEUE = "outbox";

function keyOf(m: ServiceBusReceivedMessage): number {
  const body: unknown = m.body;
  const parsed =
    body instanceof Uint8Array ? (JSON.parse(Buffer.from(body).toString("utf8")) as unknown) : body;
  return (parsed as { k: number }).k;
}

/**
 * The relay while Service Bus throttles 30% of sends (ServerBusy): its client makes one try per send, as the
 * relay CLI's (src/cli/relay.ts), and a throttled batch waits out the relay's own back-off inside the window.
 */
describe("outbox relay: sends throttled at 30% (ServerBusy)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));
  const telemetry = useTelemetryCapture();
  let pool: pg.Pool;
  let store: PostgresOutboxStore;
  let relay: Relay | undefined;
  let client: ServiceBusClient;

  before(async () => {
    pool = new pg.Pool({ connectionString: await createTestDatabase("outbox throttled"), max: 4 });
    store = createPostgresOutboxStore({ pool });
    await store.migrate();
    client = new ServiceBusClient(fixture.broker.connectionString, {
      retryOptions: { maxRetries: 0, timeoutInMs: 20_000 },
    });
  });
  after(async () => {
    await relay?.stop();
    await client?.close();
    await store?.close();
    await pool?.end();
  });

  it("sends every row once, in order, sets none aside, and counts each throttled batch as a failed send", async () => {
    fixture.broker.throttle({ send: { share: 0.3 } });
    const errors: unknown[] = [];
    const sender = createOutboxSender({ client, queue: QUEUE });
    relay = await startRelay({
      store,
      sender,
      batchSize: 5,
      pollIntervalMs: 200,
      retryDelayMs: 100,
      onError: (error) => errors.push(error),
    });
    const keys: number[] = [];
    for (let t = 0; t < 10; t++) {
      const c = await pool.connect();
      try {
        await c.query("BEGIN");
        const batch = [1, 2, 3].map((j) => t * 3 + j);
        await enqueue(
          c,
          batch.map((k) => ({ type: "Throttled", key: String(k), body: { k } })),
        );
        await c.query("COMMIT");
        keys.push(...batch);
      } finally {
        c.release();
      }
    }
    const r = relay;
    await waitUntil(() => r.counters.sent === keys.length, `all ${keys.length} rows sent`, 40_000);
    fixture.broker.throttle({});
    assert.equal(r.counters.setAside, 0, "throttling sets no row aside");
    assert.ok(r.counters.failedSends > 0, "some batches were throttled");
    assert.equal(fixture.broker.throttleCounts().send.throttled, r.counters.failedSends);
    assert.equal(
      metricTotal(await telemetry().collect(), Metric.throttled, {
        "sbinbox.servicebus.operation": "send",
        "messaging.destination.name": QUEUE,
      }),
      r.counters.failedSends,
      "each throttled send counted in sbinbox.servicebus.throttled (send)",
    );
    assert.ok(
      errors.every((e) => (e as { code?: string }).code === "ServiceBusy"),
      `only ServiceBusy failures: ${errors.map(String).join("; ")}`,
    );
    const receiver = client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
    const got: number[] = [];
    while (got.length < keys.length) {
      const some = await receiver.receiveMessages(keys.length, { maxWaitTimeInMs: 1_000 });
      if (some.length === 0) break;
      got.push(...some.map(keyOf));
    }
    got.push(...(await receiver.receiveMessages(10, { maxWaitTimeInMs: 300 })).map(keyOf));
    await receiver.close();
    assert.deepEqual(got, keys, "each row once, in Id order");
    await sender.close();
  });
});
