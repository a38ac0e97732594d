import assert from "node:assert/strict";
import {
  isServiceBusError,
  type ServiceBusReceivedMessage,
  type ServiceBusReceiver,
} from "@azure/service-bus";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";

describe("local broker: settlement, delivery counts and the dead-letter queue", () => {
  const fixture = useLocalBroker(
    brokerConfig({
      settle: { MaxDeliveryCount: 10 },
      poison: { MaxDeliveryCount: 3 },
      locks: { LockDuration: "PT1S" },
    }),
  );

  async function sendOne(queue: string, messageId: string, body: unknown = messageId): Promise<void> {
    const sender = fixture.client.createSender(queue);
    await sender.sendMessages({ body, messageId });
    await sender.close();
  }

  async function receiveOne(receiver: ServiceBusReceiver): Promise<ServiceBusReceivedMessage> {
    for (let i = 0; i < 5; i++) {
      const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2000 });
      if (message) return message;
    }
    throw new Error("no message arrived");
  }

  it("complete removes the message", async () => {
    await sendOne("settle", "complete-1");
    const receiver = fixture.client.createReceiver("settle");
    const message = await receiveOne(receiver);
    assert.equal(fixture.broker.counts("settle").locked, 1);
    await receiver.completeMessage(message);
    await receiver.close();
    const counts = fixture.broker.counts("settle");
    assert.equal(counts.active + counts.locked, 0);
  });

  it("abandon redelivers the message with its delivery count raised by one", async () => {
    await sendOne("settle", "abandon-1");
    const receiver = fixture.client.createReceiver("settle");
    const first = await receiveOne(receiver);
    assert.equal(first.deliveryCount, 0);
    await receiver.abandonMessage(first, { retryReason: "try again" });
    const second = await receiveOne(receiver);
    assert.equal(second.messageId, "abandon-1");
    assert.equal(second.deliveryCount, 1);
    assert.equal(
      second.applicationProperties?.["retryReason"],
      "try again",
      "propertiesToModify are applied",
    );
    assert.notEqual(second.lockToken, first.lockToken);
    await receiver.completeMessage(second);
    await receiver.close();
  });

  it("dead-letters with reason and description, and the dead-letter queue can be received from", async () => {
    await sendOne("settle", "dead-1");
    const receiver = fixture.client.createReceiver("settle");
    const message = await receiveOne(receiver);
    await receiver.deadLetterMessage(message, {
      deadLetterReason: "Invalid",
      deadLetterErrorDescription: "no customer",
    });
    await receiver.close();
    assert.equal(fixture.broker.counts("settle").deadLettered, 1);
    const dlq = fixture.client.createReceiver("settle", { subQueueType: "deadLetter" });
    const dead = await receiveOne(dlq);
    assert.equal(dead.messageId, "dead-1");
    assert.equal(dead.deadLetterReason, "Invalid");
    assert.equal(dead.deadLetterErrorDescription, "no customer");
    assert.equal(dead.deadLetterSource, "settle");
    assert.equal(dead.sequenceNumber?.toNumber(), message.sequenceNumber?.toNumber());
    const [peeked] = await dlq.peekMessages(1);
    assert.equal(peeked?.messageId, "dead-1", "the dead-letter queue can be peeked too");
    await dlq.completeMessage(dead);
    await dlq.close();
    assert.equal(fixture.broker.counts("settle").deadLettered, 0);
  });

  it("abandoning up to MaxDeliveryCount moves the message to the dead-letter queue as MaxDeliveryCountExceeded", async () => {
    await sendOne("poison", "poison-1");
    const receiver = fixture.client.createReceiver("poison");
    for (let attempt = 0; attempt < 3; attempt++) {
      const message = await receiveOne(receiver);
      assert.equal(message.deliveryCount, attempt);
      await receiver.abandonMessage(message);
    }
    await receiver.close();
    const counts = fixture.broker.counts("poison");
    assert.equal(counts.active + counts.locked, 0);
    assert.equal(counts.deadLettered, 1);
    const dlq = fixture.client.createReceiver("poison", { subQueueType: "deadLetter" });
    const dead = await receiveOne(dlq);
    assert.equal(dead.messageId, "poison-1");
    assert.equal(dead.deadLetterReason, "MaxDeliveryCountExceeded");
    await dlq.completeMessage(dead);
    await dlq.close();
  });

  it("defer hides the message until receiveDeferredMessages fetches it by sequence number", async () => {
    await sendOne("settle", "defer-1");
    const receiver = fixture.client.createReceiver("settle");
    const message = await receiveOne(receiver);
    await receiver.deferMessage(message);
    assert.equal(fixture.broker.counts("settle").deferred, 1);
    assert.deepEqual(
      await receiver.receiveMessages(1, { maxWaitTimeInMs: 300 }),
      [],
      "a deferred message is not delivered",
    );
    const [deferred] = await receiver.receiveDeferredMessages([message.sequenceNumber!]);
    assert.ok(deferred);
    assert.equal(deferred.messageId, "defer-1");
    assert.equal(deferred.state, "deferred");
    // Delivery counts as Service Bus keeps them (the SDK's live deferredMessage.spec.ts): 0, deferred, then 1,
    // abandoned (it stays deferred), then 2
    assert.equal(message.deliveryCount, 0);
    assert.equal(deferred.deliveryCount, 1);
    await receiver.abandonMessage(deferred);
    assert.equal(fixture.broker.counts("settle").deferred, 1);
    const [again] = await receiver.receiveDeferredMessages([message.sequenceNumber!]);
    assert.equal(again?.deliveryCount, 2);
    await receiver.completeMessage(again);
    assert.equal(fixture.broker.counts("settle").deferred, 0);
    await assert.rejects(receiver.receiveDeferredMessages([message.sequenceNumber!]), (error: unknown) => {
      assert.ok(isServiceBusError(error));
      assert.equal(error.code, "MessageNotFound");
      return true;
    });
    await receiver.close();
  });

  it("settles each delivery of a disposition range: two completes issued in one tick complete both", async () => {
    const sender = fixture.client.createSender("settle");
    await sender.sendMessages([
      { body: 1, messageId: "range-1" },
      { body: 2, messageId: "range-2" },
    ]);
    await sender.close();
    const receiver = fixture.client.createReceiver("settle");
    const messages: ServiceBusReceivedMessage[] = [];
    while (messages.length < 2)
      messages.push(...(await receiver.receiveMessages(2 - messages.length, { maxWaitTimeInMs: 2000 })));
    await Promise.all(messages.map((m) => receiver.completeMessage(m)));
    await receiver.close();
    const counts = fixture.broker.counts("settle");
    assert.equal(counts.active + counts.locked, 0);
  });

  it("lock expiry redelivers with delivery count 1, and completing the stale copy fails with MessageLockLost", async () => {
    await sendOne("locks", "expire-1");
    const receiver = fixture.client.createReceiver("locks", { maxAutoLockRenewalDurationInMs: 0 });
    const stale = await receiveOne(receiver);
    assert.equal(stale.deliveryCount, 0);
    await waitUntil(() => fixture.broker.counts("locks").active === 1, "the lock expired");
    const again = await receiveOne(receiver);
    assert.equal(again.messageId, "expire-1");
    assert.equal(again.deliveryCount, 1);
    await assert.rejects(receiver.completeMessage(stale), (error: unknown) => {
      assert.ok(isServiceBusError(error), String(error));
      assert.equal(error.code, "MessageLockLost");
      return true;
    });
    await receiver.completeMessage(again);
    await receiver.close();
    assert.equal(fixture.broker.counts("locks").active + fixture.broker.counts("locks").locked, 0);
  });

  it("renewMessageLock extends lockedUntilUtc and keeps the message locked past its first expiry", async () => {
    await sendOne("locks", "renew-1");
    const receiver = fixture.client.createReceiver("locks", { maxAutoLockRenewalDurationInMs: 0 });
    const message = await receiveOne(receiver);
    const first = message.lockedUntilUtc!.getTime();
    await new Promise((resolve) => setTimeout(resolve, 600));
    const renewed = await receiver.renewMessageLock(message);
    assert.ok(
      renewed.getTime() >= first + 500,
      `renewed ${renewed.toISOString()} vs ${new Date(first).toISOString()}`,
    );
    await new Promise((resolve) => setTimeout(resolve, 600)); // past the original lock, inside the renewed one
    assert.equal(fixture.broker.counts("locks").locked, 1);
    await receiver.completeMessage(message);
    await receiver.close();
  });
});
