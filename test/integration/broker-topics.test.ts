import assert from "node:assert/strict";
import { isServiceBusError, type ServiceBusReceivedMessage } from "@azure/service-bus";
import { parseConfig } from "../../src/localbroker/config.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";

const config = parseConfig({
  UserConfig: {
    Namespaces: [
      {
        Name: "test",
        Queues: [],
        Topics: [
          {
            Name: "events",
            Properties: { RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: "PT1M" },
            Subscriptions: [
              { Name: "billing", Properties: { MaxDeliveryCount: 2, LockDuration: "PT5S" } },
              { Name: "email", Properties: { MaxDeliveryCount: 5 } },
              {
                Name: "eu-large",
                Rules: [
                  {
                    Name: "large",
                    Properties: {
                      FilterType: "Sql",
                      SqlFilter: {
                        SqlExpression: "region IN ('eu', 'uk') AND amount >= 100 AND sys.Label LIKE 'Order%'",
                      },
                    },
                  },
                ],
              },
              {
                Name: "vip",
                Rules: [
                  {
                    Name: "vip-correlation",
                    Properties: {
                      FilterType: "Correlation",
                      CorrelationFilter: { Label: "OrderPlaced", Properties: { tier: "vip" } },
                    },
                  },
                ],
              },
            ],
          },
        ],
      },
    ],
  },
});

describe("local broker: topics and subscriptions through the SDK", () => {
  // The broker's clock runs ahead by `clockAheadMs` once a test moves it: a scheduled message comes due when the
  // test says, not after a wall-clock delay that a loaded machine can outlast before the test looks.
  let clockAheadMs = 0;
  const fixture = useLocalBroker(config, { now: () => Date.now() + clockAheadMs });

  async function receiveAll(
    subscription: string,
    max: number,
    waitMs = 300,
  ): Promise<ServiceBusReceivedMessage[]> {
    const receiver = fixture.client.createReceiver("events", subscription);
    const received: ServiceBusReceivedMessage[] = [];
    for (;;) {
      const batch = await receiver.receiveMessages(max, { maxWaitTimeInMs: waitMs });
      if (batch.length === 0) break;
      for (const m of batch) await receiver.completeMessage(m);
      received.push(...batch);
    }
    await receiver.close();
    return received;
  }

  it("copies each send to every subscription whose rules match, and drops a duplicate at the topic", async () => {
    const sender = fixture.client.createSender("events");
    await sender.sendMessages([
      {
        messageId: "m1",
        body: { n: 1 },
        subject: "OrderPlaced",
        applicationProperties: { region: "eu", amount: 150 },
      },
      {
        messageId: "m2",
        body: { n: 2 },
        subject: "OrderPlaced",
        applicationProperties: { region: "us", amount: 150, tier: "vip" },
      },
      {
        messageId: "m3",
        body: { n: 3 },
        subject: "OrderShipped",
        applicationProperties: { region: "uk", amount: 10 },
      },
    ]);
    await sender.sendMessages({ messageId: "m1", body: { n: 1 }, subject: "OrderPlaced" }); // a resend: dropped
    await sender.close();
    const ids = async (sub: string): Promise<string[]> =>
      (await receiveAll(sub, 10)).map((m) => String(m.messageId)).sort();
    assert.deepEqual(await ids("billing"), ["m1", "m2", "m3"]);
    assert.deepEqual(await ids("email"), ["m1", "m2", "m3"]);
    assert.deepEqual(await ids("eu-large"), ["m1"]);
    assert.deepEqual(await ids("vip"), ["m2"]);
    assert.equal(fixture.broker.topicCounts("events").duplicatesDropped, 1);
  });

  it("keeps locks, delivery counts and MaxDeliveryCount per subscription, with a dead-letter subqueue each", async () => {
    const sender = fixture.client.createSender("events");
    await sender.sendMessages({ messageId: "poison-1", body: "x", subject: "Other" });
    await sender.close();
    const billing = fixture.client.createReceiver("events", "billing");
    for (let i = 0; i < 2; i++) {
      const [m] = await billing.receiveMessages(1, { maxWaitTimeInMs: 2000 });
      assert.ok(m, `delivery ${i + 1}`);
      assert.equal(m.deliveryCount, i);
      await billing.abandonMessage(m);
    }
    await billing.close();
    const dlq = fixture.client.createReceiver("events", "billing", { subQueueType: "deadLetter" });
    const [dead] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 2000 });
    assert.ok(dead);
    assert.equal(dead.messageId, "poison-1");
    assert.equal(dead.deadLetterReason, "MaxDeliveryCountExceeded");
    assert.equal(dead.deadLetterSource, "events/Subscriptions/billing");
    await dlq.completeMessage(dead);
    await dlq.close();
    // The other subscription's copy is untouched by billing's abandons.
    const [copy] = await receiveAll("email", 1);
    assert.equal(copy?.messageId, "poison-1");
    assert.equal(copy?.deliveryCount, 0);
  });

  it("renews a lock and peeks on a subscription's $management", async () => {
    const sender = fixture.client.createSender("events");
    await sender.sendMessages({ messageId: "renew-1", body: 1 });
    await sender.close();
    const receiver = fixture.client.createReceiver("events", "billing", {
      maxAutoLockRenewalDurationInMs: 0,
    });
    const peeked = await receiver.peekMessages(5);
    assert.deepEqual(
      peeked.map((m) => m.messageId),
      ["renew-1"],
    );
    const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2000 });
    assert.ok(m?.lockedUntilUtc);
    const before = m.lockedUntilUtc.getTime();
    await new Promise((resolve) => setTimeout(resolve, 20));
    const after = await receiver.renewMessageLock(m);
    assert.ok(after.getTime() > before, "the renewed lock ends later");
    await receiver.completeMessage(m);
    await receiver.close();
    await receiveAll("email", 10);
  });

  it("schedules on the topic: the copies reach the subscriptions when due, and a cancel reaches none", async () => {
    const sender = fixture.client.createSender("events");
    const dueInMs = 60_000;
    const [kept] = await sender.scheduleMessages(
      { messageId: "later-1", body: 1 },
      new Date(Date.now() + clockAheadMs + dueInMs),
    );
    const [cancelled] = await sender.scheduleMessages(
      { messageId: "later-2", body: 2 },
      new Date(Date.now() + clockAheadMs + dueInMs),
    );
    assert.ok(kept !== undefined && cancelled !== undefined);
    await sender.cancelScheduledMessages(cancelled);
    assert.equal(fixture.broker.counts("events/Subscriptions/email").active, 0, "nothing before it is due");
    clockAheadMs += dueInMs;
    await waitUntil(
      () => fixture.broker.counts("events/Subscriptions/email").active === 1,
      "the copy is due",
    );
    await sender.close();
    assert.deepEqual(
      (await receiveAll("email", 10)).map((m) => m.messageId),
      ["later-1"],
    );
    assert.deepEqual(
      (await receiveAll("billing", 10)).map((m) => m.messageId),
      ["later-1"],
    );
  });

  it("refuses a receive from the topic itself, a send to a subscription, and an unknown subscription", async () => {
    const fromTopic = fixture.client.createReceiver("events");
    await assert.rejects(
      fromTopic.receiveMessages(1, { maxWaitTimeInMs: 500 }),
      /Cannot receive from topic 'events'/,
    );
    await fromTopic.close();
    const unknown = fixture.client.createReceiver("events", "nobody");
    await assert.rejects(unknown.receiveMessages(1, { maxWaitTimeInMs: 500 }), (error: unknown) => {
      assert.ok(isServiceBusError(error));
      assert.equal(error.code, "MessagingEntityNotFound");
      return true;
    });
    await unknown.close();
    const toSubscription = fixture.client.createSender("events/Subscriptions/billing");
    await assert.rejects(toSubscription.sendMessages({ body: 1 }), /Cannot send to a subscription/);
    await toSubscription.close();
  });
});
