import assert from "node:assert/strict";
import {
  ServiceBusClient,
  type ServiceBusMessage,
  type ServiceBusReceivedMessage,
  type ServiceBusSessionReceiver,
} from "@azure/service-bus";
import { parseConfig } from "../../src/localbroker/config.ts";
import { takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";

const SESSION_QUEUES = ["orders", "order-lock", "order-poison", "order-next", "order-state"];

describe("local broker: sessions (queues and subscriptions) through the JavaScript SDK", () => {
  const fixture = useLocalBroker(
    parseConfig({
      UserConfig: {
        Namespaces: [
          {
            Name: "test",
            Queues: [
              ...SESSION_QUEUES.map((Name) => ({
                Name,
                Properties: {
                  RequiresSession: true,
                  LockDuration: Name === "order-lock" ? "PT1S" : "PT30S",
                  MaxDeliveryCount: Name === "order-poison" ? 3 : 10,
                },
              })),
              { Name: "plain", Properties: {} },
            ],
            Topics: [
              {
                Name: "accounts",
                Properties: {},
                Subscriptions: [
                  { Name: "ledger", Properties: { RequiresSession: true } },
                  { Name: "audit", Properties: {} },
                ],
              },
            ],
          },
        ],
      },
    }),
  );

  async function send(entity: string, messages: ServiceBusMessage[]): Promise<void> {
    const sender = fixture.client.createSender(entity);
    try {
      await sender.sendMessages(messages);
    } finally {
      await sender.close();
    }
  }

  const inSession = (sessionId: string, ...ids: string[]): ServiceBusMessage[] =>
    ids.map((messageId) => ({ messageId, sessionId, body: messageId }));

  async function receive(
    receiver: ServiceBusSessionReceiver,
    n: number,
  ): Promise<ServiceBusReceivedMessage[]> {
    const got: ServiceBusReceivedMessage[] = [];
    for (let i = 0; i < 10 && got.length < n; i++)
      got.push(...(await receiver.receiveMessages(n - got.length, { maxWaitTimeInMs: 1000 })));
    return got;
  }

  async function expectError(
    work: Promise<unknown>,
    check: (error: Error & { code?: string }) => void,
  ): Promise<void> {
    let caught: unknown;
    try {
      await work;
    } catch (error) {
      caught = error;
    }
    assert.ok(caught instanceof Error, "the call failed");
    check(caught);
  }

  it("refuses a send without a session id to a session queue, in Service Bus's words, and stores nothing", async () => {
    await expectError(send("orders", [{ messageId: "no-session", body: 1 }]), (error) =>
      assert.match(
        error.message,
        /The SessionId was not set on a message, and it cannot be sent to the entity/,
      ),
    );
    await expectError(
      send("orders", [
        { messageId: "batch-1", sessionId: "a", body: 1 },
        { messageId: "batch-2", body: 2 },
      ]),
      (error) => assert.match(error.message, /SessionId was not set/),
    );
    const counts = fixture.broker.counts("orders");
    assert.equal(counts.active + counts.deadLettered, 0, "neither the single send nor the batch was stored");
  });

  it("refuses a plain receiver on a session queue and a session receiver on a plain queue", async () => {
    await send("orders", inSession("refusals", "r-1"));
    const plain = fixture.client.createReceiver("orders");
    await expectError(plain.receiveMessages(1, { maxWaitTimeInMs: 1000 }), (error) =>
      assert.match(
        error.message,
        /A non-sessionful message receiver cannot be created on an entity that requires sessions/,
      ),
    );
    await plain.close();
    await expectError(fixture.client.acceptSession("plain", "x"), (error) =>
      assert.match(
        error.message,
        /A sessionful message receiver cannot be created on an entity that does not require sessions/,
      ),
    );
    const receiver = await fixture.client.acceptSession("orders", "refusals");
    const [message] = await receive(receiver, 1);
    await receiver.completeMessage(message!);
    await receiver.close();
  });

  it("acceptSession gets that session's messages only, in order; a second receiver of it is refused", async () => {
    await send("orders", [
      ...inSession("s-1", "s1-a"),
      ...inSession("s-2", "s2-a"),
      ...inSession("s-1", "s1-b", "s1-c"),
      ...inSession("s-2", "s2-b"),
    ]);
    const receiver = await fixture.client.acceptSession("orders", "s-1");
    assert.equal(receiver.sessionId, "s-1");
    assert.ok(
      receiver.sessionLockedUntilUtc.getTime() > Date.now() + 20_000,
      "locked for the 30 s lock duration",
    );
    await expectError(fixture.client.acceptSession("orders", "s-1"), (error) =>
      assert.equal(error.code, "SessionCannotBeLocked"),
    );
    const messages = await receive(receiver, 3);
    assert.deepEqual(
      messages.map((m) => m.messageId),
      ["s1-a", "s1-b", "s1-c"],
    );
    assert.ok(messages.every((m) => m.sessionId === "s-1"));
    for (const m of messages) await receiver.completeMessage(m);
    assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 300 }), [], "nothing of s-2 came");
    await receiver.close();
    const other = await fixture.client.acceptSession("orders", "s-2");
    const rest = await receive(other, 2);
    assert.deepEqual(
      rest.map((m) => m.messageId),
      ["s2-a", "s2-b"],
    );
    for (const m of rest) await other.completeMessage(m);
    await other.close();
  });

  it("acceptNextSession takes the unlocked session whose oldest message came first, then the next", async () => {
    await send("order-next", [
      ...inSession("n-2", "n2-a"),
      ...inSession("n-1", "n1-a"),
      ...inSession("n-2", "n2-b"),
    ]);
    const first = await fixture.client.acceptNextSession("order-next");
    const second = await fixture.client.acceptNextSession("order-next");
    assert.equal(first.sessionId, "n-2");
    assert.equal(second.sessionId, "n-1");
    const fromFirst = await receive(first, 2);
    assert.deepEqual(
      fromFirst.map((m) => m.messageId),
      ["n2-a", "n2-b"],
    );
    for (const m of [...fromFirst, ...(await receive(second, 1))])
      await (m.sessionId === "n-2" ? first : second).completeMessage(m);
    await first.close();
    await second.close();
  });

  it("acceptNextSession waits for a session to come, and times out with ServiceTimeout after the client's time-out", async () => {
    const client = new ServiceBusClient(fixture.broker.connectionString, {
      retryOptions: { maxRetries: 0, timeoutInMs: 1500 },
    });
    try {
      const started = Date.now();
      await expectError(client.acceptNextSession("order-next"), (error) =>
        assert.equal(error.code, "ServiceTimeout"),
      );
      const waited = Date.now() - started;
      assert.ok(waited >= 1300, `the broker held the attach for the time-out (${waited} ms)`);
      const accepting = client.acceptNextSession("order-next");
      await new Promise((resolve) => setTimeout(resolve, 300));
      await send("order-next", inSession("late", "late-1"));
      const receiver = await accepting;
      assert.equal(receiver.sessionId, "late", "the waiting attach got the session sent after it");
      const [message] = await receive(receiver, 1);
      await receiver.completeMessage(message!);
      await receiver.close();
    } finally {
      await client.close();
    }
  });

  it("abandon puts the message back at its session's head with its delivery count raised", async () => {
    await send("orders", inSession("ab", "ab-1", "ab-2", "ab-3"));
    const receiver = await fixture.client.acceptSession("orders", "ab");
    const [one, two] = await receive(receiver, 2);
    assert.deepEqual([one!.messageId, two!.messageId], ["ab-1", "ab-2"]);
    await receiver.abandonMessage(one!);
    await receiver.abandonMessage(two!);
    const again = await receive(receiver, 3);
    assert.deepEqual(
      again.map((m) => [m.messageId, m.deliveryCount]),
      [
        ["ab-1", 1],
        ["ab-2", 1],
        ["ab-3", 0],
      ],
    );
    for (const m of again) await receiver.completeMessage(m);
    await receiver.close();
  });

  it("renewSessionLock keeps the session past its lock duration", async () => {
    await send("order-lock", inSession("renewed", "rn-1"));
    const receiver = await fixture.client.acceptSession("order-lock", "renewed", {
      maxAutoLockRenewalDurationInMs: 0,
    });
    const [message] = await receive(receiver, 1);
    const before = receiver.sessionLockedUntilUtc.getTime();
    for (let i = 0; i < 4; i++) {
      await new Promise((resolve) => setTimeout(resolve, 400));
      await receiver.renewSessionLock();
    }
    assert.ok(receiver.sessionLockedUntilUtc.getTime() > before + 1000, "the lock moved forward");
    await receiver.completeMessage(message!);
    assert.equal(fixture.broker.counts("order-lock").active, 0);
    await receiver.close();
  });

  it("an expired session lock ends the receiver and frees the session; its messages keep their counts, raised by one", async () => {
    await send("order-lock", inSession("expiring", "ex-1", "ex-2"));
    const receiver = await fixture.client.acceptSession("order-lock", "expiring", {
      maxAutoLockRenewalDurationInMs: 0,
    });
    const [first] = await receive(receiver, 1);
    assert.equal(first!.deliveryCount, 0);
    await new Promise((resolve) => setTimeout(resolve, 1300));
    await expectError(receiver.completeMessage(first!), () => {});
    await expectError(receiver.renewSessionLock(), (error) => assert.equal(error.code, "SessionLockLost"));
    const next = await fixture.client.acceptNextSession("order-lock", { maxAutoLockRenewalDurationInMs: 0 });
    assert.equal(next.sessionId, "expiring");
    const again = await receive(next, 2);
    assert.deepEqual(
      again.map((m) => [m.messageId, m.deliveryCount]),
      [
        ["ex-1", 1],
        ["ex-2", 0],
      ],
      "the message delivered under the expired lock counts one attempt, the other none",
    );
    for (const m of again) await next.completeMessage(m);
    await next.close();
    await receiver.close();
  });

  it("closing a session receiver frees the session at once; unsettled messages come back uncounted", async () => {
    await send("orders", inSession("closed", "cl-1"));
    const receiver = await fixture.client.acceptSession("orders", "closed");
    const [message] = await receive(receiver, 1);
    assert.equal(message!.deliveryCount, 0);
    await receiver.close();
    const next = await fixture.client.acceptSession("orders", "closed");
    const [again] = await receive(next, 1);
    assert.equal(again!.messageId, "cl-1");
    assert.equal(again!.deliveryCount, 0, "Microsoft's table: a closed session counts no attempt");
    await next.completeMessage(again!);
    await next.close();
  });

  it("session state: none at first, set and read back by a later receiver, cleared with null", async () => {
    await send("order-state", inSession("st", "st-1"));
    const receiver = await fixture.client.acceptSession("order-state", "st");
    assert.equal(await receiver.getSessionState(), null);
    await receiver.setSessionState({ applied: 7 });
    await receiver.close();
    const later = await fixture.client.acceptSession("order-state", "st");
    assert.deepEqual(await later.getSessionState(), { applied: 7 });
    await later.setSessionState(null);
    assert.equal(await later.getSessionState(), null);
    const [message] = await receive(later, 1);
    await later.completeMessage(message!);
    await later.close();
    const big = await fixture.client.acceptSession("order-state", "st");
    await expectError(big.setSessionState(Buffer.alloc(300 * 1024)), (error) =>
      assert.match(error.message, /exceeds the entity's maximum message size/),
    );
    await big.close();
  });

  it("peek on a session receiver sees that session's messages only, locked or not", async () => {
    await send("orders", [
      ...inSession("pk-1", "pk1-a"),
      ...inSession("pk-2", "pk2-a"),
      ...inSession("pk-1", "pk1-b"),
    ]);
    const receiver = await fixture.client.acceptSession("orders", "pk-1");
    const [locked] = await receive(receiver, 1);
    const peeked = await receiver.peekMessages(10);
    assert.deepEqual(
      peeked.map((m) => m.messageId),
      ["pk1-a", "pk1-b"],
    );
    await receiver.completeMessage(locked!);
    const [rest] = await receive(receiver, 1);
    await receiver.completeMessage(rest!);
    await receiver.close();
    const other = await fixture.client.acceptSession("orders", "pk-2");
    const [m] = await receive(other, 1);
    await other.completeMessage(m!);
    await other.close();
  });

  it("MaxDeliveryCount and dead-lettering apply per message; the session then goes on with its next message", async () => {
    await send("order-poison", inSession("p", "p-1", "p-2", "p-3"));
    const receiver = await fixture.client.acceptSession("order-poison", "p");
    for (let attempt = 0; attempt < 3; attempt++) {
      const [head] = await receive(receiver, 1);
      assert.equal(head!.messageId, "p-1", `attempt ${attempt} gets the head again`);
      await receiver.abandonMessage(head!);
    }
    const [second] = await receive(receiver, 1);
    assert.equal(
      second!.messageId,
      "p-2",
      "past MaxDeliveryCount the head is dead-lettered and the session goes on",
    );
    await receiver.deadLetterMessage(second!, {
      deadLetterReason: "Poison",
      deadLetterErrorDescription: "bad amount",
    });
    const [third] = await receive(receiver, 1);
    assert.equal(third!.messageId, "p-3");
    await receiver.completeMessage(third!);
    await receiver.close();
    const dead = await takeDeadLetters(fixture.client, "order-poison");
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.sessionId, m.deadLetterReason]),
      [
        ["p-1", "p", "MaxDeliveryCountExceeded"],
        ["p-2", "p", "Poison"],
      ],
      "the dead-letter queue is read with a plain receiver and keeps each message's session id",
    );
  });

  it("defer inside a session; the deferred message is received by sequence number through the session", async () => {
    await send("orders", inSession("df", "df-1", "df-2"));
    const receiver = await fixture.client.acceptSession("orders", "df");
    const [first] = await receive(receiver, 1);
    await receiver.deferMessage(first!);
    const [second] = await receive(receiver, 1);
    assert.equal(second!.messageId, "df-2");
    await receiver.completeMessage(second!);
    const [deferred] = await receiver.receiveDeferredMessages([first!.sequenceNumber!]);
    assert.equal(deferred!.messageId, "df-1");
    // as Service Bus counts a deferred message's deliveries, on a session receiver too: 0, 1, then 2
    assert.equal(first!.deliveryCount, 0);
    assert.equal(deferred!.deliveryCount, 1);
    await receiver.abandonMessage(deferred!);
    const [again] = await receiver.receiveDeferredMessages([first!.sequenceNumber!]);
    assert.equal(again!.deliveryCount, 2);
    await receiver.completeMessage(again!);
    await receiver.close();
    assert.equal(fixture.broker.counts("orders").deferred, 0);
  });

  it("a session subscription: sessions per subscription; a copy without a session id is dead-lettered there", async () => {
    await send("accounts", [
      { messageId: "acc-1", sessionId: "acct-9", body: 1 },
      { messageId: "acc-2", body: 2 },
      { messageId: "acc-3", sessionId: "acct-9", body: 3 },
    ]);
    await waitUntil(() => fixture.broker.counts("accounts/Subscriptions/audit").active === 3, "audit has 3");
    const receiver = await fixture.client.acceptSession("accounts", "ledger", "acct-9");
    const got = await receive(receiver, 2);
    assert.deepEqual(
      got.map((m) => m.messageId),
      ["acc-1", "acc-3"],
    );
    for (const m of got) await receiver.completeMessage(m);
    await receiver.close();
    const dlq = fixture.client.createReceiver("accounts", "ledger", {
      subQueueType: "deadLetter",
      receiveMode: "receiveAndDelete",
    });
    const [dead] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 2000 });
    await dlq.close();
    assert.equal(dead?.messageId, "acc-2");
    assert.equal(dead?.deadLetterReason, "Session id is null.");
    const audit = fixture.client.createReceiver("accounts", "audit", { receiveMode: "receiveAndDelete" });
    assert.equal(
      (await audit.receiveMessages(3, { maxWaitTimeInMs: 2000 })).length,
      3,
      "a plain subscription takes all",
    );
    await audit.close();
  });
});
