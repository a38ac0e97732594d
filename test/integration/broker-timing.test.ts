import assert from "node:assert/strict";
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";

describe("local broker: duplicate detection, scheduling and time to live", () => {
  const fixture = useLocalBroker(
    brokerConfig({
      dedup: { RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: "PT1S" },
      nodedup: { RequiresDuplicateDetection: false },
      timed: { RequiresDuplicateDetection: false },
      expiring: { DeadLetteringOnMessageExpiration: true, RequiresDuplicateDetection: false },
      dropping: { DeadLetteringOnMessageExpiration: false, RequiresDuplicateDetection: false },
    }),
  );

  async function drain(queue: string, subQueueType?: "deadLetter"): Promise<ServiceBusReceivedMessage[]> {
    const receiver = fixture.client.createReceiver(queue, subQueueType ? { subQueueType } : {});
    const received: ServiceBusReceivedMessage[] = [];
    for (;;) {
      const batch = await receiver.receiveMessages(10, { maxWaitTimeInMs: 300 });
      if (batch.length === 0) break;
      for (const m of batch) await receiver.completeMessage(m);
      received.push(...batch);
    }
    await receiver.close();
    return received;
  }

  it("drops the same MessageId sent twice inside the window; the second send still succeeds", async () => {
    const sender = fixture.client.createSender("dedup");
    await sender.sendMessages({ body: "first", messageId: "dup-1" });
    await sender.sendMessages({ body: "second", messageId: "dup-1" });
    await sender.close();
    const received = await drain("dedup");
    assert.deepEqual(
      received.map((m) => String(m.body)),
      ["first"],
    );
    assert.equal(fixture.broker.counts("dedup").duplicatesDropped, 1);
  });

  it("delivers the same MessageId again once the window has passed", async () => {
    const sender = fixture.client.createSender("dedup");
    await sender.sendMessages({ body: "first", messageId: "dup-2" });
    await new Promise((resolve) => setTimeout(resolve, 1200)); // the window is PT1S
    await sender.sendMessages({ body: "second", messageId: "dup-2" });
    await sender.close();
    const received = await drain("dedup");
    assert.deepEqual(received.map((m) => String(m.body)).sort(), ["first", "second"]);
  });

  it("detects duplicates inside one batch too, and tells a listener which MessageIds it dropped", async () => {
    const dropped: string[] = [];
    const stop = fixture.broker.onDuplicateDropped("dedup", (id) => dropped.push(id));
    const sender = fixture.client.createSender("dedup");
    await sender.sendMessages([
      { body: "a", messageId: "dup-3" },
      { body: "b", messageId: "dup-3" },
      { body: "c", messageId: "dup-4" },
    ]);
    stop();
    await sender.sendMessages({ body: "d", messageId: "dup-4" });
    await sender.close();
    const received = await drain("dedup");
    assert.deepEqual(received.map((m) => String(m.body)).sort(), ["a", "c"]);
    assert.deepEqual(dropped, ["dup-3"], "the drop after the listener was removed is not reported");
  });

  it("keeps duplicates when the queue does not require duplicate detection", async () => {
    const sender = fixture.client.createSender("nodedup");
    await sender.sendMessages({ body: "first", messageId: "same" });
    await sender.sendMessages({ body: "second", messageId: "same" });
    await sender.close();
    assert.equal((await drain("nodedup")).length, 2);
  });

  it("delivers a scheduled message at its time, not before", async () => {
    const sender = fixture.client.createSender("timed");
    const at = new Date(Date.now() + 800);
    const [seq] = await sender.scheduleMessages({ body: "later", messageId: "sched-1" }, at);
    await sender.close();
    assert.ok(seq && seq.toNumber() > 0);
    assert.equal(fixture.broker.counts("timed").scheduled, 1);
    const receiver = fixture.client.createReceiver("timed");
    const [peeked] = await receiver.peekMessages(1);
    assert.equal(peeked?.state, "scheduled");
    assert.equal(peeked?.scheduledEnqueueTimeUtc?.getTime(), at.getTime());
    const received: ServiceBusReceivedMessage[] = [];
    while (received.length === 0)
      received.push(...(await receiver.receiveMessages(1, { maxWaitTimeInMs: 2000 })));
    assert.ok(Date.now() >= at.getTime() - 5, "not delivered before its time");
    assert.equal(received[0]?.messageId, "sched-1");
    await receiver.completeMessage(received[0]);
    await receiver.close();
  });

  it("honours scheduledEnqueueTimeUtc on an ordinary send", async () => {
    const sender = fixture.client.createSender("timed");
    const at = new Date(Date.now() + 600);
    await sender.sendMessages({ body: "later", messageId: "sched-send-1", scheduledEnqueueTimeUtc: at });
    await sender.close();
    assert.equal(fixture.broker.counts("timed").scheduled, 1);
    await waitUntil(() => fixture.broker.counts("timed").active === 1, "the scheduled time came");
    assert.ok(Date.now() >= at.getTime() - 5, "not enqueued before its time");
    const [message] = await drain("timed");
    assert.equal(message?.messageId, "sched-send-1");
  });

  it("cancels a scheduled message", async () => {
    const sender = fixture.client.createSender("timed");
    const [seq] = await sender.scheduleMessages(
      { body: "never", messageId: "sched-2" },
      new Date(Date.now() + 60_000),
    );
    assert.equal(fixture.broker.counts("timed").scheduled, 1);
    await sender.cancelScheduledMessages(seq!);
    await sender.close();
    assert.equal(fixture.broker.counts("timed").scheduled, 0);
    assert.equal(fixture.broker.counts("timed").active, 0);
  });

  it("dead-letters an expired message when DeadLetteringOnMessageExpiration is set", async () => {
    const sender = fixture.client.createSender("expiring");
    await sender.sendMessages({ body: "stale", messageId: "ttl-1", timeToLive: 200 });
    await sender.close();
    await waitUntil(() => fixture.broker.counts("expiring").deadLettered === 1, "the message expired");
    assert.equal(fixture.broker.counts("expiring").active, 0);
    const [dead] = await drain("expiring", "deadLetter");
    assert.equal(dead?.messageId, "ttl-1");
    assert.equal(dead?.deadLetterReason, "TTLExpiredException");
  });

  it("drops an expired message when dead-lettering on expiry is off", async () => {
    const sender = fixture.client.createSender("dropping");
    await sender.sendMessages({ body: "stale", messageId: "ttl-2", timeToLive: 200 });
    await sender.close();
    await waitUntil(() => fixture.broker.counts("dropping").expired === 1, "the message expired");
    const counts = fixture.broker.counts("dropping");
    assert.equal(counts.active + counts.deadLettered, 0);
    assert.deepEqual(await drain("dropping"), []);
  });
});

describe("local broker: time is injectable", () => {
  let offsetMs = 0;
  const fixture = useLocalBroker(
    brokerConfig({
      clocked: { RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: "PT10M" },
    }),
    { now: () => Date.now() + offsetMs },
  );

  it("the duplicate window follows the broker's clock, so a ten-minute window can be tested at once", async () => {
    const sender = fixture.client.createSender("clocked");
    await sender.sendMessages({ body: "first", messageId: "clock-1" });
    offsetMs += 9 * 60_000;
    await sender.sendMessages({ body: "inside the window", messageId: "clock-1" });
    assert.equal(fixture.broker.counts("clocked").duplicatesDropped, 1);
    offsetMs += 2 * 60_000;
    await sender.sendMessages({ body: "after the window", messageId: "clock-1" });
    await sender.close();
    const counts = fixture.broker.counts("clocked");
    assert.equal(counts.duplicatesDropped, 1);
    assert.equal(counts.active, 2);
  });
});
