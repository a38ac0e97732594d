import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import type { Database } from "../../src/app/database.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { OWN_RETRY } from "../../src/servicebus/throttling.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { countCredits, creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";
const MAX_DELIVERY = 3;
const COUNT = 40;

/**
 * A Standard namespace throttling about a third of everything (learn.microsoft.com, "Throttling operations on
 * Azure Service Bus"): the publisher's sends, the worker's deliveries, settlements and lock renewals answered
 * ServerBusy. Nothing may be lost, applied twice or dead-lettered, and no delivery may be spent on it.
 */
describe("worker: a namespace throttled at 30% (ServerBusy on send, receive, settle, management)", function () {
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT5S", MaxDeliveryCount: MAX_DELIVERY, RequiresDuplicateDetection: true },
    }),
  );
  let db: Database;
  let client: ServiceBusClient;
  let worker: Worker | undefined;

  before(async () => {
    db = await exampleDatabase("throttled");
    // The retry options the worker's and the publisher's own clients get (src/app/app.ts, publisher.ts).
    client = new ServiceBusClient(fixture.broker.connectionString, { retryOptions: OWN_RETRY });
  });
  after(async () => {
    await worker?.stop();
    await client?.close();
    await db?.close();
  });

  it("every message is applied once and completed at its first delivery, slow ones' locks kept through throttled renewals", async function () {
    this.timeout(120_000);
    fixture.broker.throttle({
      send: { share: 0.3 },
      receive: { share: 0.3 },
      settle: { share: 0.3 },
      management: { share: 0.3 },
    });
    const deliveries = new Map<string, number[]>();
    const slow = new Set<string>();
    worker = startTestWorker({
      client,
      db,
      maxConcurrentCalls: 8,
      lockDurationMs: 5_000,
      // The first eight are held past their lock (a slow handler): only a renewed lock lets them complete.
      beforeSettle: async (message) => {
        deliveries.set(message.messageId, [
          ...(deliveries.get(message.messageId) ?? []),
          message.deliveryCount,
        ]);
        if (slow.size < 8 && !slow.has(message.messageId)) {
          slow.add(message.messageId);
          await new Promise((resolve) => setTimeout(resolve, 7_000));
        }
      },
    });
    const publisher = createPublisher({ client, queue: QUEUE });
    for (let i = 0; i < COUNT; i += 4)
      await publisher.publishBatch([0, 1, 2, 3].map((j) => demoEvent("throttled", i + j)));
    await publisher.close();

    await waitUntil(() => worker!.stats.committed >= COUNT, `${COUNT} messages applied`, 100_000);
    // A message whose lock was lost would come back: wait for the queue to empty before counting.
    await waitUntil(
      () => {
        const c = fixture.broker.counts(QUEUE);
        return c.active + c.locked + c.scheduled === 0;
      },
      "the queue empty",
      30_000,
    );
    const throttled = fixture.broker.throttleCounts();
    fixture.broker.throttle({});
    for (const kind of ["send", "receive", "settle", "management"] as const)
      assert.ok(
        throttled[kind].throttled > 0,
        `some ${kind} operations were throttled: ${JSON.stringify(throttled)}`,
      );

    assert.equal(await countCredits(db), COUNT, "each message applied");
    assert.deepEqual([...new Set((await creditsPerMessage(db)).values())], [1], "none applied twice");
    const counts = fixture.broker.counts(QUEUE);
    assert.equal(counts.deadLettered, 0);
    assert.equal(
      counts.active + counts.locked,
      0,
      `nothing left behind: ${JSON.stringify(counts)} ${JSON.stringify(worker.stats)} ${JSON.stringify([...deliveries])}`,
    );
    assert.equal(worker.stats.committed, COUNT);
    assert.equal(worker.stats.failed, 0, "throttling is not a handler failure");
    // Deliveries spent: none. (Before the broker split its disposition ranges, a throttled settlement beside a
    // completed one was answered "completed" in one merged frame; the worker let that message's lock run out and it
    // came back as an inbox duplicate, one or two of 40 under load.)
    const spent = [...deliveries].filter(([, counts]) => counts.some((c) => c > 0));
    assert.equal(worker.stats.duplicate, 0, "no message came back");
    assert.deepEqual(spent, [], `${spent.length} deliveries spent`);
    process.stdout.write(`      deliveries spent under throttling: ${spent.length} of ${COUNT}\n`);
  });

  it("under a management budget of 2 credits a second (Standard's model), six slow messages received together keep their locks", async function () {
    this.timeout(120_000);
    await worker?.stop();
    worker = undefined;
    const before = fixture.broker.throttleCounts().management.throttled;
    // SDK renewals, the keeper's renewals and settlements by token all draw on the same two credits a second
    fixture.broker.throttle({ management: { creditsPerSecond: 2 } });
    const deliveries = new Map<string, number[]>();
    worker = startTestWorker({
      client,
      db,
      maxConcurrentCalls: 8,
      lockDurationMs: 5_000,
      // every one held three locks long: its lock must be renewed twice or more under the budget
      beforeSettle: async (message) => {
        deliveries.set(message.messageId, [
          ...(deliveries.get(message.messageId) ?? []),
          message.deliveryCount,
        ]);
        await new Promise((resolve) => setTimeout(resolve, 15_000));
      },
    });
    const publisher = createPublisher({ client, queue: QUEUE });
    await publisher.publishBatch([0, 1, 2, 3, 4, 5].map((j) => demoEvent("budget", j)));
    await publisher.close();
    await waitUntil(() => worker!.stats.committed >= 6, "6 messages applied", 90_000);
    await waitUntil(
      () => {
        const c = fixture.broker.counts(QUEUE);
        return c.active + c.locked + c.scheduled === 0;
      },
      "the queue empty",
      60_000,
    );
    const throttled = fixture.broker.throttleCounts().management.throttled - before;
    fixture.broker.throttle({});
    assert.ok(throttled > 0, "some management operations were throttled");
    const spent = [...deliveries].filter(([, counts]) => counts.some((c) => c > 0));
    assert.deepEqual(spent, [], `${spent.length} deliveries spent (${throttled} throttled)`);
    assert.equal(worker.stats.duplicate, 0, "no message came back");
    assert.equal(worker.stats.failed, 0);
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
  });
});
