import assert from "node:assert/strict";
import { isServiceBusError } from "@azure/service-bus";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";

async function expectQuotaExceeded(promise: Promise<unknown>): Promise<string> {
  let message = "";
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(isServiceBusError(error), `expected a ServiceBusError, got ${String(error)}`);
    assert.equal(error.code, "QuotaExceeded");
    message = error.message;
    return true;
  });
  return message;
}

/** MaxSizeInMegabytes: a backlog past the entity's size is refused with QuotaExceeded, as Service Bus does. */
describe("local broker: the queue size cap (MaxSizeInMegabytes)", () => {
  const fixture = useLocalBroker(
    brokerConfig({ capped: { MaxSizeInMegabytes: 1, RequiresDuplicateDetection: false }, roomy: {} }),
  );
  const body = "x".repeat(200 * 1024);

  it("refuses the send that would pass the cap, keeps what it holds, and takes sends again once drained", async () => {
    const sender = fixture.client.createSender("capped");
    let accepted = 0;
    let refusal = "";
    for (let i = 0; i < 10 && refusal === ""; i++) {
      try {
        await sender.sendMessages({ body, messageId: `cap-${i}` });
        accepted += 1;
      } catch (error) {
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the SDK's error, as thrown
        refusal = await expectQuotaExceeded(Promise.reject(error));
      }
    }
    // five 200 KiB messages fit in 1 MiB, the sixth does not
    assert.equal(accepted, 5);
    assert.match(refusal, /maximum entity size has been reached or exceeded for Queue: 'capped'/);
    assert.equal(fixture.broker.counts("capped").active, 5);

    // the cap is in bytes: a small message still fits; a scheduled one counts as a sent one
    await sender.sendMessages({ body: "small", messageId: "cap-small" });
    await expectQuotaExceeded(
      sender.scheduleMessages({ body, messageId: "cap-later" }, new Date(Date.now() + 60_000)),
    );
    assert.equal(fixture.broker.counts("capped").scheduled, 0);

    // dead-lettered messages still count against the queue's size
    const receiver = fixture.client.createReceiver("capped");
    const [first] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
    assert.ok(first);
    await receiver.deadLetterMessage(first, {
      deadLetterReason: "test",
      deadLetterErrorDescription: "counts against the cap",
    });
    await expectQuotaExceeded(sender.sendMessages({ body, messageId: "cap-after-dlq" }));

    let completed = 0;
    while (completed < 5) {
      const some = await receiver.receiveMessages(5 - completed, { maxWaitTimeInMs: 5000 });
      assert.ok(some.length > 0, `only ${completed} of the 5 remaining messages arrived`);
      for (const m of some) await receiver.completeMessage(m);
      completed += some.length;
    }
    await receiver.close();
    await sender.sendMessages({ body, messageId: "cap-room-again" });
    assert.deepEqual(
      [fixture.broker.counts("capped").active, fixture.broker.counts("capped").deadLettered],
      [1, 1],
    );
    await sender.close();
  });

  it("defaults to Azure's smallest size, 1 GB, so ordinary backlogs are untouched", async () => {
    const sender = fixture.client.createSender("roomy");
    for (let i = 0; i < 10; i++) await sender.sendMessages({ body, messageId: `roomy-${i}` });
    await sender.close();
    assert.equal(fixture.broker.counts("roomy").active, 10);
  });
});
