import assert from "node:assert/strict";
import { startApp, type App } from "../../src/app/app.ts";
import { moduleMigrations } from "../../src/app/handler-module.ts";
import { openDatabase, type Database } from "../../src/app/database.ts";
import { loadConfig } from "../../src/config/load.ts";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { exampleModule } from "../../src/example/module.ts";
import { defaultConfig } from "../../src/localbroker/config.ts";
import { serviceTopic } from "../../src/localbroker/service-topic.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { silentLogger } from "../../src/telemetry/logger.ts";
import { getJson } from "../helpers/http.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { waitUntilSettled } from "../helpers/settled.ts";
import { creditsPerMessage } from "../helpers/worker.ts";

const LOCK_MS = 1_000;
const MAX_DELIVERY = 3;
/** billing's own queue, which its subscription on the topic forwards to. */
const PATH = "billing";
const config = defaultConfig();
const { topic, queues } = serviceTopic("accounts", ["billing", "ledger"], {
  lockDurationMs: LOCK_MS,
  maxDeliveryCount: MAX_DELIVERY,
});
config.queues = queues;
config.topics = [topic];

/** The whole app on a service's queue fed by a topic, on its own PostgreSQL server, stopped for a while. */
describe("the app on a topic through forwarding: start-up, readiness and a database outage, as on a queue", function () {
  const fixture = useLocalBroker(config);
  let pgServer: EmbeddedPostgresServer;
  let app: App | undefined;
  let db: Database;

  before(async () => {
    pgServer = await EmbeddedPostgresServer.create();
    const url = await pgServer.createDatabase("topic_outage");
    db = await openDatabase({ kind: "postgres", url }, { preCheck: false, maxConnections: 2 });
    await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
    app = await startApp(
      loadConfig({
        env: {
          SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
          SBINBOX_POSTGRES_URL: url,
          SBINBOX_QUEUE: PATH,
          SBINBOX_CONSUMER: "billing",
          PORT: "0",
          SBINBOX_HTTP_HOST: "127.0.0.1",
          SBINBOX_MAX_CONCURRENT_CALLS: "8",
          SBINBOX_OUTAGE_BACKOFF_MIN_MS: "100",
          SBINBOX_OUTAGE_BACKOFF_MAX_MS: "400",
          SBINBOX_GRACE_PERIOD_MS: "3000",
          SBINBOX_QUEUE_LOCK_DURATION_MS: String(LOCK_MS),
          SBINBOX_QUEUE_MAX_DELIVERY_COUNT: String(MAX_DELIVERY),
        },
      }),
      { logger: silentLogger },
    );
  });
  after(async () => {
    await app?.stop();
    await db?.close();
    await pgServer?.dispose();
  });

  it("pauses through an outage longer than lock x deliveries: nothing dead-lettered, each applied once, consumer billing", async function () {
    this.timeout(60_000);
    const ready = await getJson(app!.httpPort, "/readyz");
    assert.equal(ready?.status, 200);
    const total = 200;
    const publisher = createPublisher({ client: fixture.client, queue: "accounts" });
    const events = Array.from({ length: total }, (_, i) => demoEvent("topic-outage", i));
    const sending = (async () => {
      for (let i = 0; i < total; i += 20) await publisher.publishBatch(events.slice(i, i + 20));
    })();
    await waitUntil(() => app!.worker.stats.committed >= 30, "some messages are applied", 20_000);
    await pgServer.stop();
    const stoppedAt = Date.now();
    await waitUntil(() => app!.worker.paused, "the worker pauses receiving", 10_000);
    assert.equal((await getJson(app!.httpPort, "/readyz"))?.status, 503);
    await sending;
    const outageMs = LOCK_MS * MAX_DELIVERY + 1_500;
    await new Promise((r) => setTimeout(r, Math.max(0, outageMs - (Date.now() - stoppedAt))));
    await pgServer.start();
    await waitUntilSettled(fixture.broker, PATH, () => app!.worker.stats, total, 30_000);
    await publisher.close();
    const counts = fixture.broker.counts(PATH);
    assert.equal(counts.deadLettered, 0, "nothing was dead-lettered");
    assert.equal(app!.worker.stats.failed, 0, "no delivery abandoned");
    const perMessage = await creditsPerMessage(db);
    assert.equal(perMessage.size, total);
    assert.deepEqual([...new Set(perMessage.values())], [1]);
    const { rows } = await db.sql.query<{ consumer: string }>(
      `SELECT DISTINCT "Consumer" AS consumer FROM "InboxMarkers"`,
    );
    assert.deepEqual(
      rows.map((r) => r.consumer),
      ["billing"],
    );
    assert.equal(fixture.broker.counts("ledger").active, total, "ledger's copies wait for ledger");
  });
});
