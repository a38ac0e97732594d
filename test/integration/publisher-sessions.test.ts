import assert from "node:assert/strict";
import { replayDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { runCli } from "../helpers/cli.ts";

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

  it("sbinbox dlq replay on a session entity: the copy carries its session id and joins the session's tail", async () => {
    const sender = fixture.client.createSender("accounts");
    await sender.sendMessages([
      { messageId: "dl-0", sessionId: "acct-dl", body: 0 },
      { messageId: "dl-1", sessionId: "acct-dl", body: 1 },
    ]);
    await sender.close();
    const receiver = await fixture.client.acceptSession("accounts", "acct-dl");
    const [first] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 });
    await receiver.deadLetterMessage(first!, {
      deadLetterReason: "Broken",
      deadLetterErrorDescription: "test",
    });
    await receiver.close();
    const result = await replayDeadLetters(fixture.client, "accounts", (m) => m.messageId === "dl-0");
    assert.equal(result.replayed.length, 1);
    const again = await fixture.client.acceptSession("accounts", "acct-dl");
    const got = await again.receiveMessages(2, { maxWaitTimeInMs: 1000 });
    for (let i = 0; got.length < 2 && i < 5; i++)
      got.push(...(await again.receiveMessages(1, { maxWaitTimeInMs: 500 })));
    assert.deepEqual(
      got.map((m) => [m.body as number, m.sessionId]),
      [
        [1, "acct-dl"],
        [0, "acct-dl"],
      ],
      "the replayed copy is in its session, after the messages sent before the replay",
    );
    for (const m of got) await again.completeMessage(m);
    await again.close();
  });

  it("sbinbox publish --session-id sets the one event's session key; an empty one is refused before any send", async () => {
    const env = {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: "accounts",
    };
    const args = ["publish", "--type", "Step", "--key", "acct-cli-0", "--body", '{"seq":0}'];
    const sent = await runCli([...args, "--session-id", "acct-cli"], env);
    assert.equal(sent.code, 0, sent.stderr);
    const refused = await runCli([...args, "--session-id", ""], env);
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /--session-id must be 1 to 128 characters/);
    const receiver = await fixture.client.acceptSession("accounts", "acct-cli");
    const got = await receiver.receiveMessages(2, { maxWaitTimeInMs: 1000 });
    assert.deepEqual(
      got.map((m) => [m.subject, m.sessionId, m.partitionKey]),
      [["Step", "acct-cli", "acct-cli"]],
    );
    for (const m of got) await receiver.completeMessage(m);
    await receiver.close();
  });
});
