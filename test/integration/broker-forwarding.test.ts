import assert from "node:assert/strict";
import { isServiceBusError } from "@azure/service-bus";
import { LocalBroker } from "../../src/localbroker/broker.ts";
import { BrokerConfigError, parseConfig, queueDefaults } from "../../src/localbroker/config.ts";
import { useLocalBroker, takeDeadLetters, waitUntil } from "../helpers/broker.ts";

/** Six queues chained f1 -> f2 -> ... -> f6: five hops from f1, four from f2. */
const chain = [1, 2, 3, 4, 5, 6].map((n) => ({
  Name: `f${n}`,
  Properties: n < 6 ? { ForwardTo: `f${n + 1}` } : {},
}));

const config = parseConfig({
  UserConfig: {
    Namespaces: [
      {
        Name: "test",
        Queues: [
          { Name: "inbound", Properties: { ForwardTo: "service" } },
          {
            Name: "service",
            Properties: {
              RequiresDuplicateDetection: true,
              MaxDeliveryCount: 1,
              LockDuration: "PT5S",
              DefaultMessageTimeToLive: "PT1S",
              DeadLetteringOnMessageExpiration: true,
            },
          },
          { Name: "tiny", Properties: { MaxSizeInMegabytes: 1, RequiresDuplicateDetection: false } },
          { Name: "to-tiny", Properties: { ForwardTo: "tiny", RequiresDuplicateDetection: false } },
          { Name: "billing-queue", Properties: { RequiresDuplicateDetection: true } },
          {
            Name: "dl-source",
            Properties: { MaxDeliveryCount: 1, ForwardDeadLetteredMessagesTo: "dl-central" },
          },
          { Name: "dl-central", Properties: {} },
          { Name: "tiny2", Properties: { MaxSizeInMegabytes: 1, RequiresDuplicateDetection: false } },
          { Name: "dl-to-tiny", Properties: { MaxDeliveryCount: 1, ForwardDeadLetteredMessagesTo: "tiny2" } },
          // A four-hop chain whose last entity dead-letters past the limit into a dead-letter queue that forwards.
          { Name: "h1", Properties: { ForwardTo: "h2" } },
          { Name: "h2", Properties: { ForwardTo: "h3" } },
          { Name: "h3", Properties: { ForwardTo: "h4" } },
          { Name: "h4", Properties: { ForwardTo: "h5" } },
          { Name: "h5", Properties: { ForwardTo: "h6", ForwardDeadLetteredMessagesTo: "h-central" } },
          { Name: "h6", Properties: {} },
          { Name: "h-central", Properties: {} },
          ...chain,
        ],
        Topics: [
          {
            // No duplicate detection on the topic: the forwarded resend reaches the queue, whose detection drops it.
            Name: "events",
            Properties: { RequiresDuplicateDetection: false },
            Subscriptions: [
              { Name: "billing", Properties: { ForwardTo: "billing-queue" } },
              { Name: "audit", Properties: {} },
            ],
          },
        ],
      },
    ],
  },
});

describe("local broker: autoforwarding (ForwardTo) through the SDK", () => {
  const fixture = useLocalBroker(config);

  /** Receives one message of `queue` and abandons it: with MaxDeliveryCount 1, that dead-letters it. */
  async function abandonOne(queue: string): Promise<string | undefined> {
    const receiver = fixture.client.createReceiver(queue);
    const [got] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.ok(got, `a message in ${queue}`);
    await receiver.abandonMessage(got);
    await receiver.close();
    return String(got.messageId);
  }

  it("forwards with the MessageId, properties and body kept", async () => {
    const sender = fixture.client.createSender("inbound");
    await sender.sendMessages({
      messageId: "fwd-1",
      body: { n: 1 },
      subject: "Credit",
      correlationId: "corr-1",
      contentType: "application/json",
      applicationProperties: { tenant: "t1", count: 3 },
    });
    await sender.close();
    const receiver = fixture.client.createReceiver("service");
    const [got] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.ok(got, "the forwarded message");
    assert.equal(got.messageId, "fwd-1");
    assert.deepEqual(got.body, { n: 1 });
    assert.equal(got.subject, "Credit");
    assert.equal(got.correlationId, "corr-1");
    assert.deepEqual(got.applicationProperties, { tenant: "t1", count: 3 });
    assert.equal(got.deliveryCount, 0);
    await receiver.completeMessage(got);
    await receiver.close();
    assert.equal(fixture.broker.counts("inbound").active, 0);
  });

  it("applies the destination's time to live: 1 s there, not the source's hour", async () => {
    await fixture.client.createSender("inbound").sendMessages({ messageId: "fwd-ttl", body: "x" });
    const dead = await takeDeadLetters(fixture.client, "service", 10, 3_000);
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.deadLetterReason, m.deadLetterSource]),
      [["fwd-ttl", "TTLExpiredException", "service"]],
    );
  });

  it("refuses a receiver on the forwarding entity, as Service Bus does", async () => {
    const receiver = fixture.client.createReceiver("inbound");
    await assert.rejects(receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), (error: unknown) => {
      // amqp:not-allowed, which the SDK reports as an InvalidOperationError, with Service Bus's own text.
      assert.ok(isServiceBusError(error));
      assert.match(
        error.message,
        /InvalidOperationError: Cannot create a message receiver on an entity with auto-forwarding enabled/,
      );
      return true;
    });
    await receiver.close();
    const sub = fixture.client.createReceiver("events", "billing");
    await assert.rejects(sub.receiveMessages(1, { maxWaitTimeInMs: 500 }), /auto-forwarding enabled/);
    await sub.close();
  });

  it("applies the destination's MaxDeliveryCount", async () => {
    await fixture.client.createSender("inbound").sendMessages({ messageId: "fwd-abandon", body: "x" });
    assert.equal(await abandonOne("service"), "fwd-abandon");
    const dead = await takeDeadLetters(fixture.client, "service", 10, 1_000);
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.deadLetterReason]),
      [["fwd-abandon", "MaxDeliveryCountExceeded"]],
    );
  });

  it("drops a forwarded duplicate by the destination's duplicate detection; other subscriptions get both", async () => {
    const sender = fixture.client.createSender("events");
    await sender.sendMessages({ messageId: "evt-1", body: "a" });
    await sender.sendMessages({ messageId: "evt-1", body: "a" }); // the publisher's resend
    await sender.close();
    await waitUntil(
      () => fixture.broker.counts("billing-queue").duplicatesDropped === 1,
      "the queue drops it",
    );
    const queue = fixture.client.createReceiver("billing-queue", { receiveMode: "receiveAndDelete" });
    const got = await queue.receiveMessages(10, { maxWaitTimeInMs: 500 });
    await queue.close();
    assert.deepEqual(
      got.map((m) => m.messageId),
      ["evt-1"],
    );
    // The topic has no duplicate detection here: the subscription without forwarding gets both sends.
    const audit = fixture.client.createReceiver("events", "audit", { receiveMode: "receiveAndDelete" });
    const audited = await audit.receiveMessages(10, { maxWaitTimeInMs: 500 });
    await audit.close();
    assert.deepEqual(
      audited.map((m) => m.messageId),
      ["evt-1", "evt-1"],
    );
    assert.equal(fixture.broker.counts("events/Subscriptions/billing").active, 0);
  });

  it("dead-letters a message past four hops with MaxTransferHopCountExceeded, in the entity of the fifth", async () => {
    const four = fixture.client.createSender("f2");
    await four.sendMessages({ messageId: "hops-4", body: "four hops" });
    await four.close();
    const end = fixture.client.createReceiver("f6", { receiveMode: "receiveAndDelete" });
    const arrived = await end.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.deepEqual(
      arrived.map((m) => m.messageId),
      ["hops-4"],
    );
    const five = fixture.client.createSender("f1");
    await five.sendMessages({ messageId: "hops-5", body: "five hops" });
    await five.close();
    const dead = await takeDeadLetters(fixture.client, "f5", 10, 1_000);
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.deadLetterReason, m.deadLetterSource]),
      [["hops-5", "MaxTransferHopCountExceeded", "f5"]],
    );
    assert.match(String(dead[0]!.deadLetterErrorDescription), /set to 4/);
    assert.equal((await end.receiveMessages(1, { maxWaitTimeInMs: 300 })).length, 0);
    await end.close();
  });

  it("keeps a message the full destination cannot take in the source's dead-letter queue", async () => {
    const sender = fixture.client.createSender("to-tiny");
    // Five of 200 KiB fit in the 1 MiB destination; the sixth does not.
    const body = Buffer.alloc(200 * 1024, 1);
    for (let i = 0; i < 6; i++) await sender.sendMessages({ messageId: `big-${i}`, body });
    await sender.close();
    await waitUntil(() => fixture.broker.counts("to-tiny").deadLettered === 1, "one forward refused");
    assert.equal(fixture.broker.counts("tiny").active, 5);
    const dead = await takeDeadLetters(fixture.client, "to-tiny", 10, 1_000);
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.deadLetterReason]),
      [["big-5", "ForwardingDestinationQuotaExceeded"]],
    );
    assert.match(String(dead[0]!.deadLetterErrorDescription), /maximum entity size/);
    const drain = fixture.client.createReceiver("tiny", { receiveMode: "receiveAndDelete" });
    assert.equal((await drain.receiveMessages(10, { maxWaitTimeInMs: 500 })).length, 5);
    await drain.close();
  });

  it("forwards dead-lettered messages (ForwardDeadLetteredMessagesTo), reason kept; that dead-letter queue refuses receivers", async () => {
    await fixture.client.createSender("dl-source").sendMessages({ messageId: "dl-1", body: "x" });
    await abandonOne("dl-source");
    const central = fixture.client.createReceiver("dl-central", { receiveMode: "receiveAndDelete" });
    const [moved] = await central.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    await central.close();
    assert.equal(moved?.messageId, "dl-1");
    assert.equal(moved.deadLetterReason, "MaxDeliveryCountExceeded");
    assert.equal(fixture.broker.counts("dl-source").deadLettered, 0);
    const dlq = fixture.client.createReceiver("dl-source", { subQueueType: "deadLetter" });
    await assert.rejects(dlq.receiveMessages(1, { maxWaitTimeInMs: 500 }), /auto-forwarding enabled/);
    await dlq.close();
  });

  it("never drops a message past the hop limit whose dead-letter queue forwards: it stays there", async () => {
    await fixture.client.createSender("h1").sendMessages({ messageId: "h-5", body: "five hops" });
    // The forwarding dead-letter queue takes it in the same step as it arrives: a drop would leave 0 here.
    await waitUntil(() => fixture.broker.counts("h5").deadLettered === 1, "held in h5's dead-letter queue");
    assert.equal(fixture.broker.counts("h-central").active, 0, "and not forwarded past the limit");
    assert.equal(fixture.broker.counts("h6").active, 0);
  });

  it("keeps a dead-lettered message whose destination is full, and forwards it once there is space", async () => {
    const filler = fixture.client.createSender("tiny2");
    const body = Buffer.alloc(200 * 1024, 1);
    for (let i = 0; i < 5; i++) await filler.sendMessages({ messageId: `fill-${i}`, body });
    await filler.close();
    await fixture.client.createSender("dl-to-tiny").sendMessages({ messageId: "dl-wait", body });
    await abandonOne("dl-to-tiny");
    await waitUntil(
      () => fixture.broker.counts("dl-to-tiny").deadLettered === 1,
      "held in the dead-letter queue",
    );
    assert.equal(fixture.broker.counts("tiny2").active, 5);
    const drain = fixture.client.createReceiver("tiny2", { receiveMode: "receiveAndDelete" });
    assert.equal((await drain.receiveMessages(1, { maxWaitTimeInMs: 1_000 })).length, 1);
    await waitUntil(
      () => fixture.broker.counts("dl-to-tiny").deadLettered === 0,
      "forwarded once space was made",
    );
    const rest = [];
    while (rest.length < 5) {
      const batch = await drain.receiveMessages(5, { maxWaitTimeInMs: 1_000 });
      if (batch.length === 0) break;
      rest.push(...batch);
    }
    await drain.close();
    assert.deepEqual(
      rest.map((m) => m.messageId),
      ["fill-1", "fill-2", "fill-3", "fill-4", "dl-wait"],
    );
  });
});

describe("local broker: forwarding refused at start-up", () => {
  const parse = (queues: { Name: string; Properties: Record<string, unknown> }[]) =>
    parseConfig({ UserConfig: { Namespaces: [{ Name: "n", Queues: queues }] } });

  it("refuses a destination that does not exist, naming it", () => {
    assert.throws(
      () => parse([{ Name: "a", Properties: { ForwardTo: "nowhere" } }]),
      (error: unknown) =>
        error instanceof BrokerConfigError &&
        /queue "a" ForwardTo names "nowhere": the auto forwarding destination entity does not exist/.test(
          error.message,
        ),
    );
  });

  it("refuses an entity forwarding to itself and a longer loop", () => {
    assert.throws(
      () => parse([{ Name: "a", Properties: { ForwardTo: "A" } }]),
      /auto-forwarding policy to itself/,
    );
    assert.throws(
      () =>
        parse([
          { Name: "a", Properties: { ForwardTo: "b" } },
          { Name: "b", Properties: { ForwardTo: "c" } },
          { Name: "c", Properties: { ForwardTo: "a" } },
        ]),
      /forwarding loop \((a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c)\)/,
    );
  });

  it("refuses a subscription forwarding to its own topic, and a config built in code", async () => {
    assert.throws(
      () =>
        parseConfig({
          UserConfig: {
            Namespaces: [
              {
                Name: "n",
                Topics: [{ Name: "t", Subscriptions: [{ Name: "s", Properties: { ForwardTo: "t" } }] }],
              },
            ],
          },
        }),
      /subscription "t\/Subscriptions\/s" ForwardTo names "t": the entity has an auto-forwarding policy to itself/,
    );
    await assert.rejects(
      LocalBroker.start({
        port: 0,
        config: {
          namespace: "n",
          queues: [{ ...queueDefaults, name: "a", forwardTo: "missing" }],
          topics: [],
          warnings: [],
        },
      }),
      BrokerConfigError,
    );
  });

  it("refuses a dead-letter queue forwarding to its own entity", () => {
    assert.throws(
      () => parse([{ Name: "a", Properties: { ForwardDeadLetteredMessagesTo: "a" } }]),
      /queue "a" ForwardDeadLetteredMessagesTo names "a": the entity has an auto-forwarding policy to itself/,
    );
  });
});
