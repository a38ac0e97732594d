import assert from "node:assert/strict";
import {
  isServiceBusError,
  ServiceBusClient,
  type ServiceBusReceivedMessage,
  type ServiceBusReceiver,
} from "@azure/service-bus";
import { parseConfig } from "../../src/localbroker/config.ts";
import { SettlementScheduler } from "../../src/servicebus/settlement.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";

/** The SDK's report of a throttled operation: ServiceBusError code ServiceBusy, with Service Bus's text. */
async function expectServiceBusy(promise: Promise<unknown>): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(isServiceBusError(error), `expected a ServiceBusError, got ${String(error)}`);
    assert.equal(error.code, "ServiceBusy");
    assert.match(error.message, /being throttled\. Error code : 50009\. Please wait 2 seconds/);
    return true;
  });
}

/**
 * Throttling as a Standard namespace past its credits (learn.microsoft.com, "Throttling operations on Azure
 * Service Bus"): each kind of operation answered with com.microsoft:server-busy, by share or credits a second.
 */
describe("local broker: throttling (ServerBusy)", () => {
  const fixture = useLocalBroker(
    brokerConfig({ t: { RequiresDuplicateDetection: false, LockDuration: "PT2S", MaxDeliveryCount: 5 } }),
  );
  // No retries: each refusal reaches the test as the SDK reports it.
  let client: ServiceBusClient;
  before(() => {
    client = new ServiceBusClient(fixture.broker.connectionString, {
      retryOptions: { maxRetries: 0, timeoutInMs: 5_000 },
    });
  });
  after(() => client.close());
  afterEach(async () => {
    fixture.broker.throttle({});
    // leave the queue empty for the next test
    const drain = client.createReceiver("t", { receiveMode: "receiveAndDelete" });
    await drain.receiveMessages(100, { maxWaitTimeInMs: 200 });
    await drain.close();
  });

  it("a throttled send is refused whole with ServiceBusy and nothing is stored; the SDK's own retry gets it through", async () => {
    fixture.broker.throttle({ send: { share: 1 } });
    const sender = client.createSender("t");
    await expectServiceBusy(sender.sendMessages({ body: "a", messageId: "s-1" }));
    await expectServiceBusy(sender.sendMessages([{ body: "b" }, { body: "c" }]));
    assert.equal(fixture.broker.counts("t").active, 0);
    await sender.close();

    fixture.broker.throttle({ send: { share: 0.5 } });
    const retrying = new ServiceBusClient(fixture.broker.connectionString, {
      retryOptions: { maxRetries: 3, retryDelayInMs: 50, timeoutInMs: 5_000 },
    });
    const s2 = retrying.createSender("t");
    for (let i = 0; i < 6; i++) await s2.sendMessages({ body: i, messageId: `r-${i}` });
    await retrying.close();
    assert.equal(fixture.broker.counts("t").active, 6);
    // every other attempt refused, spread evenly: each send after the first was refused once and retried
    assert.equal(fixture.broker.throttleCounts().send.throttled, 2 + 5);
  });

  it("a credit budget a second refuses what goes past it in that second, one credit a message", async () => {
    fixture.broker.throttle({ send: { creditsPerSecond: 3 } });
    const sender = client.createSender("t");
    // a batch of four costs four credits: more than a second's budget, refused whole
    await expectServiceBusy(sender.sendMessages([1, 2, 3, 4].map((n) => ({ body: n }))));
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    let sent = 0;
    let refused = 0;
    for (let i = 0; i < 5; i++)
      await sender.sendMessages({ body: i }).then(
        () => (sent += 1),
        (error: unknown) => {
          assert.ok(isServiceBusError(error) && error.code === "ServiceBusy", String(error));
          refused += 1;
        },
      );
    await sender.close();
    // five single sends within about a second: three fit (a second boundary may fall between them and allow more)
    assert.ok(sent >= 3 && refused >= 1, `sent ${sent}, refused ${refused}`);
    assert.equal(fixture.broker.counts("t").active, sent);
  });

  it("a throttled settlement is refused with ServiceBusy, the message keeps its lock and its delivery count, and a settlement by lock token over $management then takes", async () => {
    await client.createSender("t").sendMessages({ body: "x", messageId: "settle-1" });
    const receiver = client.createReceiver("t", { maxAutoLockRenewalDurationInMs: 0 });
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.ok(message);
    fixture.broker.throttle({ settle: { share: 1 } });
    await expectServiceBusy(receiver.completeMessage(message));
    assert.equal(fixture.broker.counts("t").locked, 1, "still locked, not completed");
    // the same settlement again on the link: the SDK refuses it itself, the delivery being settled
    await assert.rejects(receiver.completeMessage(message), /already settled/i);
    // over $management (update-disposition) it is throttled too, then taken once throttling ends
    const byToken = Object.create(message, {
      delivery: { value: { remote_settled: false } },
    }) as ServiceBusReceivedMessage;
    await expectServiceBusy(receiver.completeMessage(byToken));
    fixture.broker.throttle({});
    await receiver.completeMessage(byToken);
    assert.equal(fixture.broker.counts("t").locked, 0);
    assert.equal(fixture.broker.counts("t").active, 0);
    await receiver.close();
  });

  /** Two messages received together on one link, so their delivery ids are neighbours. */
  async function receiveTwo(receiver: ServiceBusReceiver, id: string): Promise<ServiceBusReceivedMessage[]> {
    await client.createSender("t").sendMessages([
      { body: "a", messageId: `${id}-a` },
      { body: "b", messageId: `${id}-b` },
    ]);
    const got: ServiceBusReceivedMessage[] = [];
    while (got.length < 2)
      got.push(...(await receiver.receiveMessages(2 - got.length, { maxWaitTimeInMs: 2_000 })));
    return got;
  }

  /** Which settlements the client was told were refused with ServiceBusy; anything else fails the test. */
  function busyOnes(results: PromiseSettledResult<void>[]): number[] {
    return results.flatMap((r, i) => {
      if (r.status === "fulfilled") return [];
      assert.ok(isServiceBusError(r.reason) && r.reason.code === "ServiceBusy", String(r.reason));
      return [i];
    });
  }

  it("two completes in one tick, one throttled: the client is told ServiceBusy for exactly that one, as the broker has it (no merged answer)", async () => {
    const receiver = client.createReceiver("t", { maxAutoLockRenewalDurationInMs: 0 });
    const messages = await receiveTwo(receiver, "pair");
    const before = fixture.broker.throttleCounts().settle.throttled;
    fixture.broker.throttle({ settle: { share: 0.5 } });
    // the client's rhea sends both accepted in one range; the broker answers accepted beside rejected(server-busy)
    const results = await Promise.allSettled(messages.map((m) => receiver.completeMessage(m)));
    fixture.broker.throttle({});
    assert.equal(fixture.broker.throttleCounts().settle.throttled - before, 1);
    assert.equal(busyOnes(results).length, 1, "exactly the throttled settlement reported as ServiceBusy");
    assert.equal(fixture.broker.counts("t").locked, 1, "the throttled one still locked at the broker");
    assert.equal(fixture.broker.counts("t").active, 0);
    const busy = messages[busyOnes(results)[0]!]!;
    const byToken = Object.create(busy, {
      delivery: { value: { remote_settled: false } },
    }) as ServiceBusReceivedMessage;
    await receiver.completeMessage(byToken);
    assert.equal(fixture.broker.counts("t").locked, 0);
    await receiver.close();
  });

  it("two dead-letters with different reasons in one tick (through the settlement scheduler), one throttled: each keeps its own reason at the broker", async () => {
    const receiver = client.createReceiver("t", { maxAutoLockRenewalDurationInMs: 0 });
    const messages = await receiveTwo(receiver, "dead");
    const scheduler = new SettlementScheduler();
    const deadLetter = (m: ServiceBusReceivedMessage) =>
      scheduler.settle("dead_letter", () =>
        receiver.deadLetterMessage(m, {
          deadLetterReason: `reason-${String(m.messageId)}`,
          deadLetterErrorDescription: "d",
        }),
      );
    const before = fixture.broker.throttleCounts().settle.throttled;
    fixture.broker.throttle({ settle: { share: 0.5 } });
    const results = await Promise.allSettled(messages.map(deadLetter));
    fixture.broker.throttle({});
    const busy = busyOnes(results);
    assert.equal(busy.length, fixture.broker.throttleCounts().settle.throttled - before);
    assert.equal(fixture.broker.counts("t").deadLettered, 2 - busy.length);
    for (const i of busy) {
      const m = messages[i]!;
      await receiver.deadLetterMessage(
        Object.create(m, { delivery: { value: { remote_settled: false } } }) as ServiceBusReceivedMessage,
        { deadLetterReason: `reason-${String(m.messageId)}`, deadLetterErrorDescription: "d" },
      );
    }
    const dead = await takeDeadLetters(client, "t", 10, 500);
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.deadLetterReason]).sort(),
      messages.map((m) => [m.messageId, `reason-${String(m.messageId)}`]).sort(),
    );
    await receiver.close();
  });

  it("a settlement throttled and never retried costs the message one delivery, when its lock expires (as on Azure)", async () => {
    await client.createSender("t").sendMessages({ body: "y", messageId: "settle-2" });
    const receiver = client.createReceiver("t", { maxAutoLockRenewalDurationInMs: 0 });
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.ok(message);
    fixture.broker.throttle({ settle: { share: 1 } });
    await expectServiceBusy(receiver.abandonMessage(message));
    fixture.broker.throttle({});
    await waitUntil(() => fixture.broker.counts("t").active === 1, "the lock expired", 5_000);
    const [again] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.equal(again?.messageId, "settle-2");
    assert.equal(again?.deliveryCount, 1);
    await receiver.completeMessage(again);
    await receiver.close();
  });

  it("a throttled receive holds the delivery back: nothing is locked or counted, and it is delivered once throttling ends", async () => {
    await client.createSender("t").sendMessages({ body: "z", messageId: "recv-1" });
    fixture.broker.throttle({ receive: { share: 1 } });
    const receiver = client.createReceiver("t");
    assert.equal((await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 })).length, 0);
    assert.equal(fixture.broker.counts("t").active, 1);
    assert.equal(fixture.broker.counts("t").locked, 0);
    assert.ok(fixture.broker.throttleCounts().receive.throttled >= 1);
    fixture.broker.throttle({});
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 3_000 });
    assert.equal(message?.messageId, "recv-1");
    assert.equal(message?.deliveryCount, 0);
    await receiver.completeMessage(message);
    await receiver.close();
  });

  it("throttled $management requests (peek as a receive, renew-lock and the others as management) answer ServiceBusy", async () => {
    await client.createSender("t").sendMessages({ body: "m", messageId: "mgmt-1" });
    const receiver = client.createReceiver("t", { maxAutoLockRenewalDurationInMs: 0 });
    fixture.broker.throttle({ receive: { share: 1 } });
    await expectServiceBusy(receiver.peekMessages(1));
    fixture.broker.throttle({ management: { share: 1 } });
    assert.equal((await receiver.peekMessages(1)).length, 1);
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.ok(message);
    await expectServiceBusy(receiver.renewMessageLock(message));
    fixture.broker.throttle({});
    await receiver.renewMessageLock(message);
    await receiver.completeMessage(message);
    await receiver.close();
  });
});

describe("local broker: throttling in the config file", () => {
  const namespace = (throttling: unknown) => ({
    UserConfig: { Namespaces: [{ Name: "n", Queues: [{ Name: "q" }], Throttling: throttling }] },
  });

  it("reads Throttling by kind, Share and CreditsPerSecond", () => {
    const config = parseConfig(
      namespace({ Send: { Share: 0.3 }, Settle: { Share: 0.3 }, Management: { CreditsPerSecond: 100 } }),
    );
    assert.deepEqual(config.throttling, {
      send: { share: 0.3, creditsPerSecond: undefined },
      settle: { share: 0.3, creditsPerSecond: undefined },
      management: { share: undefined, creditsPerSecond: 100 },
    });
  });

  it("refuses a bad setting, naming its path", () => {
    assert.throws(
      () => parseConfig(namespace({ Send: { Share: 30 } })),
      /UserConfig\.Namespaces\[0\]\.Throttling\.Send\.Share must be a number from 0 to 1 \(got 30\)/,
    );
    assert.throws(
      () => parseConfig(namespace({ Receive: { CreditsPerSecond: -1 } })),
      /Throttling\.Receive\.CreditsPerSecond must be a whole number >= 0/,
    );
    assert.throws(
      () => parseConfig(namespace({ Peek: { Share: 0.1 } })),
      /Throttling\.Peek is not an operation kind/,
    );
    assert.throws(
      () => parseConfig(namespace({ Send: { Percent: 10 } })),
      /Throttling\.Send\.Percent is not a throttling setting/,
    );
  });
});
