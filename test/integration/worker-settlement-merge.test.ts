import assert from "node:assert/strict";
import type { ServiceBusReceivedMessage, ServiceBusReceiver } from "@azure/service-bus";
import { SettlementScheduler } from "../../src/servicebus/settlement.ts";
import { takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";

/**
 * rhea 3.0.x folds a disposition issued in the same tick as the previous delivery's into one frame with the first
 * one's outcome. These tests settle consecutive deliveries together and read the result at the broker.
 */
describe("settlement of consecutive deliveries in one tick (rhea disposition merging)", function () {
  const fixture = useLocalBroker();
  const queue = "sbinbox";
  let receiver: ServiceBusReceiver;
  let run = 0;

  beforeEach(() => {
    receiver = fixture.client.createReceiver(queue, {
      receiveMode: "peekLock",
      maxAutoLockRenewalDurationInMs: 0,
    });
  });
  afterEach(async () => {
    await receiver.close();
    // Empty the dead-letter queue between tests.
    await takeDeadLetters(fixture.client, queue, 100, 200);
  });

  /** Two messages delivered back to back on one link, so their delivery ids are consecutive. */
  async function twoDeliveries(): Promise<[ServiceBusReceivedMessage, ServiceBusReceivedMessage]> {
    run += 1;
    const sender = fixture.client.createSender(queue);
    await sender.sendMessages([
      { messageId: `m-${run}-a`, body: "a" },
      { messageId: `m-${run}-b`, body: "b" },
    ]);
    await sender.close();
    const got: ServiceBusReceivedMessage[] = [];
    while (got.length < 2)
      got.push(...(await receiver.receiveMessages(2 - got.length, { maxWaitTimeInMs: 2_000 })));
    return [got[0]!, got[1]!];
  }

  const readDeadLetters = () => takeDeadLetters(fixture.client, queue, 10, 500);

  it("control: complete and dead-letter issued directly in one tick lose the dead-letter", async function () {
    const [a, b] = await twoDeliveries();
    await Promise.all([
      receiver.completeMessage(a),
      receiver.deadLetterMessage(b, {
        deadLetterReason: "Control",
        deadLetterErrorDescription: "issued beside a complete",
      }),
    ]);
    const counts = fixture.broker.counts(queue);
    // The defect this worker guards against: b was completed, not dead-lettered.
    assert.equal(
      counts.deadLettered,
      0,
      "rhea no longer merges dispositions; the scheduler may be unnecessary",
    );
    assert.equal(counts.active + counts.locked, 0);
  });

  it("through the scheduler, a complete and a dead-letter in one tick both take effect", async function () {
    const scheduler = new SettlementScheduler();
    const [a, b] = await twoDeliveries();
    await Promise.all([
      scheduler.settle("complete", () => receiver.completeMessage(a)),
      scheduler.settle("dead_letter", () =>
        receiver.deadLetterMessage(b, {
          deadLetterReason: "SchemaViolation",
          deadLetterErrorDescription: "amount: required",
        }),
      ),
    ]);
    const dead = await readDeadLetters();
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.deadLetterReason, m.deadLetterErrorDescription]),
      [[b.messageId, "SchemaViolation", "amount: required"]],
    );
    const counts = fixture.broker.counts(queue);
    assert.equal(counts.active + counts.locked, 0, "a was completed");
  });

  it("through the scheduler, a dead-letter then a complete in one tick: only the first is dead-lettered", async function () {
    const scheduler = new SettlementScheduler();
    const [a, b] = await twoDeliveries();
    await Promise.all([
      scheduler.settle("dead_letter", () =>
        receiver.deadLetterMessage(a, {
          deadLetterReason: "UndecodableBody",
          deadLetterErrorDescription: "not JSON",
        }),
      ),
      scheduler.settle("complete", () => receiver.completeMessage(b)),
    ]);
    const dead = await readDeadLetters();
    assert.deepEqual(
      dead.map((m) => m.messageId),
      [a.messageId],
    );
    assert.equal(fixture.broker.counts(queue).active + fixture.broker.counts(queue).locked, 0);
  });

  it("through the scheduler, a complete and an abandon in one tick both take effect", async function () {
    const scheduler = new SettlementScheduler();
    const [a, b] = await twoDeliveries();
    await Promise.all([
      scheduler.settle("complete", () => receiver.completeMessage(a)),
      scheduler.settle("abandon", () => receiver.abandonMessage(b)),
    ]);
    await waitUntil(
      () => fixture.broker.counts(queue).active === 1,
      "the abandoned message is available again",
    );
    const [again] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.equal(again?.messageId, b.messageId);
    assert.equal(again?.deliveryCount, (b.deliveryCount ?? 0) + 1);
    await receiver.completeMessage(again);
    assert.equal(fixture.broker.counts(queue).deadLettered, 0);
  });

  it("through the scheduler, two dead-letters in one tick keep their own reasons", async function () {
    const scheduler = new SettlementScheduler();
    const [a, b] = await twoDeliveries();
    await Promise.all([
      scheduler.settle("dead_letter", () =>
        receiver.deadLetterMessage(a, {
          deadLetterReason: "UnknownMessageType",
          deadLetterErrorDescription: "x",
        }),
      ),
      scheduler.settle("dead_letter", () =>
        receiver.deadLetterMessage(b, {
          deadLetterReason: "MessageTooLarge",
          deadLetterErrorDescription: "y",
        }),
      ),
    ]);
    const dead = await readDeadLetters();
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.deadLetterReason]).sort(),
      [
        [a.messageId, "UnknownMessageType"],
        [b.messageId, "MessageTooLarge"],
      ].sort(),
    );
  });
});
