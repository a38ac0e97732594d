import assert from "node:assert/strict";
import { isServiceBusError, type ServiceBusReceivedMessage } from "@azure/service-bus";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";

async function expectCode(promise: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(isServiceBusError(error), `expected a ServiceBusError, got ${String(error)}`);
    assert.equal(error.code, code);
    return true;
  });
}

describe("local broker: sending and receiving through the SDK", () => {
  const fixture = useLocalBroker(
    brokerConfig({ basics: {}, small: { MaxMessageSizeInKilobytes: 1, RequiresDuplicateDetection: false } }),
  );

  async function receiveAll(queue: string, count: number): Promise<ServiceBusReceivedMessage[]> {
    const receiver = fixture.client.createReceiver(queue);
    const received: ServiceBusReceivedMessage[] = [];
    while (received.length < count) {
      const batch = await receiver.receiveMessages(count - received.length, { maxWaitTimeInMs: 2000 });
      if (batch.length === 0) break;
      for (const m of batch) await receiver.completeMessage(m);
      received.push(...batch);
    }
    await receiver.close();
    return received;
  }

  it("round-trips body, application properties, correlation id, subject, content type and time to live", async () => {
    const sender = fixture.client.createSender("basics");
    const created = new Date("2026-01-02T03:04:05.000Z");
    await sender.sendMessages({
      body: { order: 42, lines: ["a", "b"] },
      messageId: "round-trip-1",
      correlationId: "corr-7",
      subject: "OrderPlaced",
      contentType: "application/json",
      timeToLive: 120_000,
      replyTo: "replies",
      applicationProperties: { tenant: "t1", attempt: 3, urgent: true, created },
    });
    await sender.close();
    const [message] = await receiveAll("basics", 1);
    assert.ok(message);
    assert.deepEqual(message.body, { order: 42, lines: ["a", "b"] });
    assert.equal(message.messageId, "round-trip-1");
    assert.equal(message.correlationId, "corr-7");
    assert.equal(message.subject, "OrderPlaced");
    assert.equal(message.contentType, "application/json");
    assert.equal(message.timeToLive, 120_000);
    assert.equal(message.replyTo, "replies");
    assert.deepEqual(message.applicationProperties, {
      tenant: "t1",
      attempt: 3,
      urgent: true,
      created: created.getTime(),
    });
    assert.equal(message.deliveryCount, 0);
    assert.ok(message.sequenceNumber && message.sequenceNumber.toNumber() > 0);
    assert.ok(message.enqueuedTimeUtc instanceof Date);
  });

  it("assigns a MessageId when the sender gave none", async () => {
    const sender = fixture.client.createSender("basics");
    await sender.sendMessages({ body: "no id" });
    await sender.close();
    const [message] = await receiveAll("basics", 1);
    assert.match(String(message?.messageId), /^[0-9a-f]{32}$/);
  });

  it("accepts arrays and batches, each message delivered separately with its own id", async () => {
    const sender = fixture.client.createSender("basics");
    await sender.sendMessages([
      { body: 1, messageId: "arr-1" },
      { body: 2, messageId: "arr-2" },
    ]);
    const batch = await sender.createMessageBatch();
    assert.equal(batch.maxSizeInBytes, 256 * 1024, "the sender link advertises the queue's max message size");
    for (let i = 0; i < 5; i++) assert.ok(batch.tryAddMessage({ body: i, messageId: `batch-${i}` }));
    await sender.sendMessages(batch);
    await sender.close();
    const received = await receiveAll("basics", 7);
    assert.deepEqual(received.map((m) => m.messageId).sort(), [
      "arr-1",
      "arr-2",
      "batch-0",
      "batch-1",
      "batch-2",
      "batch-3",
      "batch-4",
    ]);
  });

  it("receiveAndDelete removes messages as they are delivered, without lock tokens", async () => {
    const sender = fixture.client.createSender("basics");
    await sender.sendMessages([
      { body: "x", messageId: "rad-1" },
      { body: "y", messageId: "rad-2" },
    ]);
    await sender.close();
    const receiver = fixture.client.createReceiver("basics", { receiveMode: "receiveAndDelete" });
    const received: ServiceBusReceivedMessage[] = [];
    while (received.length < 2)
      received.push(...(await receiver.receiveMessages(2, { maxWaitTimeInMs: 2000 })));
    await receiver.close();
    assert.deepEqual(received.map((m) => m.messageId).sort(), ["rad-1", "rad-2"]);
    assert.ok(received.every((m) => m.lockToken === undefined));
    const counts = fixture.broker.counts("basics");
    assert.equal(counts.active + counts.locked, 0);
  });

  it("peeks messages in sequence order without locking them", async () => {
    const sender = fixture.client.createSender("basics");
    await sender.sendMessages([0, 1, 2].map((i) => ({ body: i, messageId: `peek-${i}` })));
    await sender.close();
    const receiver = fixture.client.createReceiver("basics");
    const peeked = await receiver.peekMessages(10);
    assert.deepEqual(
      peeked.map((m) => m.messageId),
      ["peek-0", "peek-1", "peek-2"],
    );
    const seqs = peeked.map((m) => m.sequenceNumber!.toNumber());
    assert.deepEqual(
      [...seqs].sort((a, b) => a - b),
      seqs,
    );
    assert.equal(fixture.broker.counts("basics").locked, 0);
    assert.equal(fixture.broker.counts("basics").active, 3);
    assert.deepEqual(await receiver.peekMessages(10), [], "a second peek continues after the last one");
    await receiver.close();
    await receiveAll("basics", 3);
  });

  it("rejects a message over the size limit with MessageSizeExceeded (256 KB by default)", async () => {
    const sender = fixture.client.createSender("basics");
    await expectCode(sender.sendMessages({ body: Buffer.alloc(300 * 1024, 1) }), "MessageSizeExceeded");
    await sender.sendMessages({ body: Buffer.alloc(200 * 1024, 1), messageId: "big-but-fits" });
    await sender.close();
    const [message] = await receiveAll("basics", 1);
    assert.equal(message?.messageId, "big-but-fits");
  });

  it("applies a configured size limit (MaxMessageSizeInKilobytes)", async () => {
    const sender = fixture.client.createSender("small");
    await expectCode(sender.sendMessages({ body: Buffer.alloc(2048, 1) }), "MessageSizeExceeded");
    await sender.sendMessages({ body: "tiny" });
    await sender.close();
    assert.equal(fixture.broker.counts("small").active, 1);
  });

  it("answers an unknown queue with MessagingEntityNotFound, for senders and receivers", async () => {
    const sender = fixture.client.createSender("no-such-queue");
    await expectCode(sender.sendMessages({ body: 1 }), "MessagingEntityNotFound");
    await sender.close();
    const receiver = fixture.client.createReceiver("no-such-queue");
    await expectCode(receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 }), "MessagingEntityNotFound");
    await receiver.close();
  });
});
