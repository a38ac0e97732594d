import assert from "node:assert/strict";
import { BrokerConfigError, parseConfig } from "../../src/localbroker/config.ts";
import { takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";

/** Forwarding and sessions: into a session queue from a plain subscription (docs/topics.md), and what Azure refuses. */
describe("local broker: forwarding into a session-enabled queue", () => {
  const fixture = useLocalBroker(
    parseConfig({
      UserConfig: {
        Namespaces: [
          {
            Name: "test",
            // Duplicate detection on, as sbinbox deploys a service's queue: both subscriptions forward each send.
            Queues: [
              { Name: "svc", Properties: { RequiresSession: true, RequiresDuplicateDetection: true } },
            ],
            Topics: [
              {
                Name: "events",
                Properties: {},
                Subscriptions: [
                  { Name: "to-svc", Properties: { ForwardTo: "svc" } },
                  // As the Bicep sets it: dead-lettered messages forwarded to the service's queue too.
                  {
                    Name: "to-svc-dlq",
                    Properties: { ForwardTo: "svc", ForwardDeadLetteredMessagesTo: "svc" },
                  },
                ],
              },
            ],
          },
        ],
      },
    }),
  );

  it("keeps the session id of a forwarded message", async () => {
    const sender = fixture.client.createSender("events");
    await sender.sendMessages({ messageId: "a1", sessionId: "acct-1", body: "x" });
    await sender.close();
    const receiver = await fixture.client.acceptSession("svc", "acct-1", {
      maxAutoLockRenewalDurationInMs: 0,
    });
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 3_000 });
    assert.equal(message?.messageId, "a1");
    assert.equal(message?.sessionId, "acct-1");
    await receiver.completeMessage(message);
    await receiver.close();
  });

  it("dead-letters a message without a session id in the source subscription, as Azure does, not in the session queue", async () => {
    const sender = fixture.client.createSender("events");
    await sender.sendMessages({ messageId: "nosess", body: "x" });
    await sender.close();
    await waitUntil(
      () => fixture.broker.counts("events/Subscriptions/to-svc").deadLettered === 1,
      "dead-lettered at the source",
    );
    const dlq = fixture.client.createReceiver("events", "to-svc", {
      subQueueType: "deadLetter",
      receiveMode: "receiveAndDelete",
    });
    const [dead] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 1_000 });
    await dlq.close();
    assert.equal(dead?.messageId, "nosess");
    assert.match(
      String(dead?.deadLetterErrorDescription),
      /Could not forward to 'svc': The SessionId was not set on a message/,
    );
    assert.deepEqual(
      await takeDeadLetters(fixture.client, "svc"),
      [],
      "nothing in the session queue's dead-letter queue",
    );
    assert.equal(fixture.broker.counts("svc").active, 0);
    // The subscription whose dead-letter queue forwards to the session queue keeps it there: the queue refuses it.
    assert.equal(fixture.broker.counts("events/Subscriptions/to-svc-dlq").deadLettered, 1);
  });
});

describe("local broker: ForwardTo on a session-enabled entity refused at start-up", () => {
  const namespace = (ns: Record<string, unknown>) => ({ UserConfig: { Namespaces: [{ Name: "n", ...ns }] } });

  it("refuses RequiresSession with ForwardTo on a queue and on a subscription, naming the setting", () => {
    for (const config of [
      namespace({
        Queues: [
          { Name: "sink", Properties: {} },
          { Name: "sq", Properties: { RequiresSession: true, ForwardTo: "sink" } },
        ],
      }),
      namespace({
        Queues: [{ Name: "sink", Properties: {} }],
        Topics: [
          {
            Name: "t",
            Properties: {},
            Subscriptions: [{ Name: "s", Properties: { RequiresSession: true, ForwardTo: "sink" } }],
          },
        ],
      }),
    ])
      assert.throws(
        () => parseConfig(config),
        (error: unknown) =>
          error instanceof BrokerConfigError &&
          /ForwardTo.*cannot be set with RequiresSession true/.test(error.message),
      );
  });
});
