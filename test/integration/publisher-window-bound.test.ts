import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { createPublisher, ResendWindowError } from "../../src/servicebus/publisher.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";

/**
 * A send() on a caller's client with the SDK's default policy is itself up to four SDK tries 30 s apart: the
 * publisher bounds those too by the duplicate window, so no try starts where a copy of an earlier one that did
 * arrive would no longer be dropped.
 */
describe("publisher: the SDK's own retries stay inside the duplicate window", function () {
  const fixture = useLocalBroker(brokerConfig({ w: { RequiresDuplicateDetection: true } }));

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
});
