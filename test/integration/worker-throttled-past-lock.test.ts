import assert from "node:assert/strict";
import { ServiceBusClient, type ServiceBusClientOptions } from "@azure/service-bus";
import type { Database } from "../../src/app/database.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { OWN_RETRY } from "../../src/servicebus/throttling.ts";
import { Metric } from "../../src/telemetry/names.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";
const LOCK_MS = 2_000;

/**
 * Every settlement and every lock renewal answered ServerBusy: a settlement retried on and on would outlast the
 * message's 2 s lock (the SDK's default policy alone would retry for 90 s). The worker's settle loop must stop
 * at the lock's end: no try after it, the message left to the broker's redelivery, counted; the redelivery is then
 * completed as an inbox duplicate once throttling ends. Nothing lost, nothing applied twice, nothing dead-lettered.
 */
describe("worker: a settlement throttled past its lock stops at the lock and is left to redelivery", function () {
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT2S", MaxDeliveryCount: 10, RequiresDuplicateDetection: true },
    }),
  );
  const telemetry = useTelemetryCapture();
  let db: Database;
  let worker: Worker | undefined;
  let client: ServiceBusClient | undefined;

  before(async () => {
    db = await exampleDatabase("throttled-past-lock");
  });
  afterEach(async () => {
    fixture.broker.throttle({});
    await worker?.stop();
    worker = undefined;
    await client?.close();
  });
  after(async () => {
    await db?.close();
  });

  // With the SDK's default the first ServerBusy is inside the SDK's own retry (its next try 30 s later, on a delivery
  // already settled, so it never reaches the broker), and the worker never sees it: the settlement guard ends the
  // wait at the lock or 5 s after the settlement began, the later (SettlementUnconfirmed, lock-expired).
  const cases: [string, ServiceBusClientOptions, "throttledToRedelivery" | "settlementFailures"][] = [
    [
      "the worker's own client (OWN_RETRY, one SDK try per call)",
      { retryOptions: OWN_RETRY },
      "throttledToRedelivery",
    ],
    ["a caller's client with the SDK's default policy (3 retries, 30 s apart)", {}, "settlementFailures"],
  ];
  for (const [name, clientOptions, givenUp] of cases)
    it(`${name}: no settle try after the lock, counted, redelivered and completed once`, async function () {
      this.timeout(60_000);
      const label = clientOptions.retryOptions ? "own" : "default";
      client = new ServiceBusClient(fixture.broker.connectionString, clientOptions);
      const publisher = createPublisher({
        connection: { connectionString: fixture.broker.connectionString },
        queue: QUEUE,
      });
      const event = demoEvent(`past-lock-${label}`, 1);
      const deliveries: { count: number; at: number }[] = [];
      let releaseRedeliveries: () => void = () => undefined;
      const redeliveriesReleased = new Promise<void>((resolve) => (releaseRedeliveries = resolve));
      const before = fixture.broker.throttleCounts().settle.throttled;
      fixture.broker.throttle({ settle: { share: 1 }, management: { share: 1 } });
      worker = startTestWorker({
        client,
        db,
        lockDurationMs: LOCK_MS,
        beforeSettle: async (message) => {
          deliveries.push({ count: message.deliveryCount, at: Date.now() });
          // A redelivery waits until the first delivery's settle loop has been watched past its lock.
          if (message.deliveryCount > 0) await redeliveriesReleased;
        },
      });
      const { messageId } = await publisher.publish(event.type, event.key, event.body);
      await publisher.close();

      await waitUntil(() => deliveries.length >= 1, "the first delivery decided", 20_000);
      // The lock was granted before the decision: it ends no later than this.
      const lockEnd = deliveries[0]!.at + LOCK_MS;
      await waitUntil(() => worker!.stats[givenUp] >= 1, "the settlement given up", 10_000);
      const gaveUpAfterLock = Date.now() - lockEnd;
      const bound =
        givenUp === "throttledToRedelivery" ? lockEnd : Math.max(lockEnd, deliveries[0]!.at + 5_000);
      assert.ok(
        Date.now() - bound < 600,
        `the settlement given up ${gaveUpAfterLock} ms after the lock (${Date.now() - bound} ms after its bound)`,
      );
      // From just past the lock, with everything still throttled: no settlement try reaches the broker.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, lockEnd + 300 - Date.now())));
      const settleTries = fixture.broker.throttleCounts().settle;
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      assert.deepEqual(fixture.broker.throttleCounts().settle, settleTries, "no settle try after the lock");
      assert.equal(worker.stats.settlementFailures, 1);
      assert.equal(worker.stats.throttledToRedelivery, givenUp === "throttledToRedelivery" ? 1 : 0);
      if (givenUp === "throttledToRedelivery") {
        const metrics = await telemetry().collect();
        assert.equal(
          metricTotal(metrics, Metric.throttled, { "sbinbox.servicebus.operation": "settle" }),
          settleTries.throttled - before,
          "each throttled settle try counted by the worker as the broker counted it",
        );
      }

      fixture.broker.throttle({});
      releaseRedeliveries();
      await waitUntil(
        () => {
          const c = fixture.broker.counts(QUEUE);
          return worker!.stats.duplicate >= 1 && c.active + c.locked === 0;
        },
        "the redelivery completed as a duplicate",
        20_000,
      );
      assert.ok(deliveries.length >= 2, "the message was redelivered");
      assert.equal(deliveries[1]!.count, 1, "one delivery spent by the lock's end");
      assert.equal((await creditsPerMessage(db)).get(messageId), 1, "applied once");
      assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
      process.stdout.write(
        `      ${label} client: settlement given up ${gaveUpAfterLock} ms after the lock; settle tries throttled ${settleTries.throttled - before}\n`,
      );
    });
});
