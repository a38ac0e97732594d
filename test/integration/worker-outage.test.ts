import assert from "node:assert/strict";
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import { startApp, type App } from "../../src/app/app.ts";
import { moduleMigrations } from "../../src/app/handler-module.ts";
import { exampleModule } from "../../src/example/module.ts";
import { openDatabase, type Database } from "../../src/app/database.ts";
import { loadConfig } from "../../src/config/load.ts";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { silentLogger } from "../../src/telemetry/logger.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { countCredits, creditsPerMessage } from "../helpers/worker.ts";

const QUEUE = "sbinbox";
const LOCK_MS = 1_000;
const MAX_DELIVERY = 3;

async function getJson(
  port: number,
  path: string,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/**
 * The whole app (config, store, worker, HTTP listener) on its own PostgreSQL server, which the test stops for
 * longer than lock duration x max delivery count while messages stream in.
 */
describe("worker: a database outage pauses receiving instead of burning messages (own PostgreSQL)", function () {
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT1S", MaxDeliveryCount: MAX_DELIVERY, RequiresDuplicateDetection: true },
    }),
  );
  let pgServer: EmbeddedPostgresServer;
  let app: App | undefined;
  let db: Database;

  before(async () => {
    pgServer = await EmbeddedPostgresServer.create();
    const url = await pgServer.createDatabase("outage");
    const config = loadConfig({
      env: {
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
        SBINBOX_POSTGRES_URL: url,
        SBINBOX_QUEUE: QUEUE,
        PORT: "0",
        SBINBOX_HTTP_HOST: "127.0.0.1",
        SBINBOX_MAX_CONCURRENT_CALLS: "8",
        SBINBOX_OUTAGE_BACKOFF_MIN_MS: "100",
        SBINBOX_OUTAGE_BACKOFF_MAX_MS: "400",
        SBINBOX_GRACE_PERIOD_MS: "3000",
        SBINBOX_QUEUE_LOCK_DURATION_MS: String(LOCK_MS),
        SBINBOX_QUEUE_MAX_DELIVERY_COUNT: String(MAX_DELIVERY),
      },
    });
    db = await openDatabase({ kind: "postgres", url }, { preCheck: false, maxConnections: 2 });
    // As a deployment does: `sbinbox migrate` first; the worker only checks the schema.
    await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
    app = await startApp(config, { logger: silentLogger });
  });
  after(async () => {
    await app?.stop();
    await db?.close();
    await pgServer?.dispose();
  });

  it("answers /healthz and /readyz when attached and the database answers", async function () {
    const health = await getJson(app!.httpPort, "/healthz");
    assert.equal(health.status, 200);
    await waitUntil(() => app!.worker.stats !== undefined, "worker");
    const ready = await getJson(app!.httpPort, "/readyz");
    assert.equal(ready.status, 200);
    assert.equal(ready.body.ready, true);
    assert.equal(ready.body.receiver, "attached");
    assert.equal(ready.body.database, "ok");
    assert.equal((await fetch(`http://127.0.0.1:${app!.httpPort}/nope`)).status, 404);
  });

  it("the database stopped longer than lock duration x max delivery count: nothing dead-lettered, all applied once", async function () {
    this.timeout(60_000);
    const total = 300;
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    const events = Array.from({ length: total }, (_, i) => demoEvent("outage", i));
    const sending = (async () => {
      for (let i = 0; i < total; i += 20) await publisher.publishBatch(events.slice(i, i + 20));
    })();
    await waitUntil(() => app!.worker.stats.committed >= 40, "some messages are applied", 20_000);
    await pgServer.stop();
    const stoppedAt = Date.now();
    await waitUntil(() => app!.worker.paused, "the worker pauses receiving", 10_000);
    const during = await getJson(app!.httpPort, "/readyz");
    assert.equal(during.status, 503);
    assert.equal(during.body.database, "unreachable");
    assert.equal(during.body.receiver, "detached");
    await sending; // the stream goes on while the database is away
    const outageMs = LOCK_MS * MAX_DELIVERY + 1_500;
    await new Promise((r) => setTimeout(r, Math.max(0, outageMs - (Date.now() - stoppedAt))));
    assert.ok(Date.now() - stoppedAt > LOCK_MS * MAX_DELIVERY);
    await pgServer.start();
    await waitUntil(
      () => app!.worker.stats.committed + app!.worker.stats.duplicate >= total,
      "everything is applied",
      30_000,
    );
    await waitUntil(
      () => fixture.broker.counts(QUEUE).active + fixture.broker.counts(QUEUE).locked === 0,
      "the queue is empty",
      10_000,
    );
    await publisher.close();
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0, "nothing was dead-lettered");
    const perMessage = await creditsPerMessage(db);
    assert.equal(perMessage.size, total, "every message applied");
    assert.deepEqual([...new Set(perMessage.values())], [1], "none applied twice");
    assert.equal(await countCredits(db), total);
    assert.ok(app!.worker.stats.outages >= 1);
    // The messages in flight when the database went away waited for it under their locks: none was abandoned.
    assert.equal(app!.worker.stats.failed, 0, "no delivery abandoned");
    const after = await getJson(app!.httpPort, "/readyz");
    assert.equal(after.status, 200);
    const dlq = fixture.client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
    const dead: ServiceBusReceivedMessage[] = await dlq.peekMessages(10);
    await dlq.close();
    assert.equal(dead.length, 0);
  });
});
