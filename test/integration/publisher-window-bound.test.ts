import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { createPublisher, ResendWindowError } from "../../src/servicebus/publisher.ts";
import { Metric } from "../../src/telemetry/names.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";

/**
 * A send() on a caller's client with the SDK's default policy is itself up to four SDK tries 30 s apart: the
 * publisher bounds those too by the duplicate window, so no try starts where a copy of an earlier one that did
 * arrive would no longer be dropped.
 */
describe("publisher: the SDK's own retries stay inside the duplicate window", function () {
  const fixture = useLocalBroker(brokerConfig({ w: { RequiresDuplicateDetection: true } }));
  const telemetry = useTelemetryCapture();

  it("every send throttled, 1.5 s of window left after the margin: refused with ResendWindowError by then, no try after it", async function () {
    this.timeout(20_000);
    // The SDK's default retry policy (3 retries, 30 s apart), as a caller's own client has it.
    const client = new ServiceBusClient(fixture.broker.connectionString);
    // 61.5 s window less the 60 s margin: 1.5 s for all tries, where the SDK alone would take 90 s
    const publisher = createPublisher({ client, queue: "w", duplicateWindowMs: 61_500 });
    fixture.broker.throttle({ send: { share: 1 } });
    const before = fixture.broker.throttleCounts().send.throttled;
    const started = Date.now();
    try {
      await assert.rejects(publisher.publish("t", "k-1", { n: 1 }), ResendWindowError);
      const took = Date.now() - started;
      assert.ok(took < 2_500, `refused after ${took} ms`);
      const tries = fixture.broker.throttleCounts().send.throttled - before;
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      assert.equal(
        fixture.broker.throttleCounts().send.throttled - before,
        tries,
        "no try after the refusal",
      );
      assert.equal(fixture.broker.counts("w").active, 0);
    } finally {
      fixture.broker.throttle({});
      await publisher.close();
      await client.close();
    }
  });

  it("its own client (one SDK try a send): each throttled send counted (sbinbox.servicebus.throttled, send) and resent 1-3 s later, every event stored once", async function () {
    this.timeout(60_000);
    const publisher = createPublisher({
      connection: { connectionString: fixture.broker.connectionString },
      queue: "w",
    });
    fixture.broker.throttle({ send: { share: 0.5 } });
    const before = fixture.broker.throttleCounts().send;
    const ids = new Set<string>();
    try {
      for (let i = 0; i < 6; i++) ids.add((await publisher.publish("t", `own-${i}`, { n: i })).messageId);
    } finally {
      fixture.broker.throttle({});
      await publisher.close();
    }
    const throttled = fixture.broker.throttleCounts().send.throttled - before.throttled;
    assert.ok(throttled >= 3, `${throttled} sends throttled`);
    assert.equal(
      metricTotal(await telemetry().collect(), Metric.throttled, {
        "sbinbox.servicebus.operation": "send",
        "messaging.destination.name": "w",
      }),
      throttled,
      "each throttled try counted once",
    );
    const receiver = fixture.client.createReceiver("w", { receiveMode: "receiveAndDelete" });
    const got = await receiver.receiveMessages(20, { maxWaitTimeInMs: 1_000 });
    await receiver.close();
    assert.deepEqual(new Set(got.map((m) => String(m.messageId))), ids, "each event stored once");
    assert.equal(got.length, ids.size);
  });
});
