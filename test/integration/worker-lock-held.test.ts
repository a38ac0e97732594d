import assert from "node:assert/strict";
import pg from "pg";
import { openDatabase, type Database } from "../../src/app/database.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { moduleMigrations } from "../../src/app/handler-module.ts";
import { exampleModule } from "../../src/example/module.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { countCredits, creditsPerMessage, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";
const MAX_DELIVERY = 3;

// A long migration holds ACCESS EXCLUSIVE on the handlers' table: every handler's statement waits out the
// statement timeout (57014, transient). The database itself answers, so the probe cannot call it an outage.
describe("worker: a table locked by a long migration (statement timeouts, the database up)", function () {
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT2S", MaxDeliveryCount: MAX_DELIVERY, RequiresDuplicateDetection: true },
    }),
  );
  let db: Database;
  let admin: pg.Client;
  let worker: Worker | undefined;

  before(async () => {
    const url = await createTestDatabase("lock_held");
    // The statement timeout shortened (1.5 s instead of 30 s); the lock and the retry policy are as in production.
    db = await openDatabase(
      { kind: "postgres", url },
      {
        preCheck: true,
        maxConnections: 12,
        timeouts: { connectMs: 1_000, statementMs: 1_500, keepAliveMs: 1_000 },
      },
    );
    await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
  });
  after(async () => {
    await admin?.query("ROLLBACK").catch(() => undefined);
    await worker?.stop();
    await db?.close();
    await admin?.end();
  });

  it("messages wait under their locks through the retry policy: none dead-lettered, each applied once after", async function () {
    this.timeout(120_000);
    worker = startTestWorker({
      client: fixture.client,
      db,
      maxConcurrentCalls: 4,
      probeTimeoutMs: 1_000,
      // The default schedule's first steps, its tail shortened so that a retry scheduled as a copy while the table
      // was locked arrives within the test (the default's next step is 2 min).
      retryPolicy: { ...defaultRetryPolicy, transientDelaysMs: [1_000, 5_000, 10_000, 15_000, 20_000] },
    });
    await admin.query("BEGIN");
    await admin.query("LOCK TABLE example_credits IN ACCESS EXCLUSIVE MODE");
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    await publisher.publishBatch(Array.from({ length: 6 }, (_, i) => demoEvent("locked", i)));
    // Held past MaxDeliveryCount x LockDuration and past two in-place retries (1 s, 5 s), into the 30 s wait:
    // before the retry policy every delivery was spent here and all six were dead-lettered.
    await waitUntil(() => worker!.stats.retriesWaited >= 12, "every message waits out two retries", 60_000);
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    assert.equal(worker.stats.committed, 0, "nothing could commit while the table was locked");
    await admin.query("ROLLBACK");
    await waitUntil(
      () => worker!.stats.committed === 6,
      "everything applies after the lock is released",
      60_000,
    );
    await publisher.close();
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    assert.equal(worker.stats.outages, 0, "a locked table is not an outage: the probe answers");
    assert.deepEqual([...new Set((await creditsPerMessage(db)).values())], [1]);
    assert.equal(await countCredits(db), 6);
  });
});
