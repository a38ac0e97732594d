import assert from "node:assert/strict";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";

describe("publisher: a session key per event, for a session-enabled queue", () => {
  const fixture = useLocalBroker(brokerConfig({ accounts: { RequiresSession: true } }));

  it("sets sessionId and the matching partition key; each key's events arrive in order through its session", async () => {
    const publisher = createPublisher({ client: fixture.client, queue: "accounts" });
    try {
      await publisher.publishBatch(
        [0, 1, 2].flatMap((seq) =>
          ["acct-1", "acct-2"].map((account) => ({
            type: "Step",
            key: `${account}-${seq}`,
            body: { account, seq },
            sessionId: account,
          })),
        ),
      );
      await publisher.publish("Step", "acct-1-3", { account: "acct-1", seq: 3 }, { sessionId: "acct-1" });
    } finally {
      await publisher.close();
    }
    const receiver = await fixture.client.acceptSession("accounts", "acct-1");
    const got = await receiver.receiveMessages(10, { maxWaitTimeInMs: 1000 });
    assert.deepEqual(
      got.map((m) => [(m.body as { seq: number }).seq, m.sessionId, m.partitionKey]),
      [0, 1, 2, 3].map((seq) => [seq, "acct-1", "acct-1"]),
    );
    for (const m of got) await receiver.completeMessage(m);
    await receiver.close();
    assert.equal(fixture.broker.counts("accounts").active, 3, "acct-2's three wait in their own session");
  });

  it("an event without a session key is refused by a session queue; a key over 128 characters before any send", async () => {
    const publisher = createPublisher({ client: fixture.client, queue: "accounts" });
    try {
      await assert.rejects(
        publisher.publish("Step", "no-session", { seq: 0 }),
        /SessionId was not set on a message/,
      );
      await assert.rejects(
        publisher.publish("Step", "long", { seq: 0 }, { sessionId: "x".repeat(129) }),
        (error: unknown) => error instanceof TypeError && /1 to 128 characters/.test(error.message),
      );
    } finally {
      await publisher.close();
    }
  });
});
