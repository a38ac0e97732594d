import assert from "node:assert/strict";
import { useLocalBroker } from "../helpers/broker.ts";

describe("local broker: a receive with a max wait on an empty queue", () => {
  const fixture = useLocalBroker();

  it("returns nothing once the wait is over, and the same receiver then gets a message sent later", async () => {
    const receiver = fixture.client.createReceiver("sbinbox");
    const started = Date.now();
    const none = await receiver.receiveMessages(10, { maxWaitTimeInMs: 1000 });
    const waited = Date.now() - started;
    assert.deepEqual(none, []);
    // at least the wait asked for (less a timer's slack); the upper bound only catches a hang
    assert.ok(waited >= 900 && waited < 10_000, `returned after ${waited} ms`);
    const sender = fixture.client.createSender("sbinbox");
    await sender.sendMessages({ body: "later", messageId: "after-empty-wait" });
    await sender.close();
    const [later] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
    assert.equal(later?.messageId, "after-empty-wait");
    await receiver.completeMessage(later);
    await receiver.close();
    assert.equal(fixture.broker.counts("sbinbox").active + fixture.broker.counts("sbinbox").locked, 0);
  });
});
