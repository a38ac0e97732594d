import assert from "node:assert/strict";
import rhea from "rhea";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { managementRequest } from "../helpers/raw-management.ts";

const int = (n: number): unknown => rhea.types.wrap_int(n);

/**
 * Batch delete (com.microsoft:batch-delete-messages; learn.microsoft.com, "Batch delete messages in Azure Service
 * Bus"): the oldest messages enqueued before a time, at most the count asked and 500 a request (Standard), locked
 * ones skipped. @azure/service-bus 7.9.5 has no deleteMessages and .NET 7.21.0's DeleteMessagesAsync is not public,
 * so the request goes over plain AMQP here.
 */
describe("local broker: batch delete over $management", () => {
  const fixture = useLocalBroker(brokerConfig({ bd: {}, empty: {} }));

  it("deletes the oldest eligible messages up to the count, skipping a locked one and those enqueued after the cutoff", async () => {
    const sender = fixture.client.createSender("bd");
    await sender.sendMessages([0, 1, 2, 3, 4].map((i) => ({ body: i, messageId: `bd-${i}` })));
    await sender.scheduleMessages({ body: "later", messageId: "bd-later" }, new Date(Date.now() + 60_000));
    const receiver = fixture.client.createReceiver("bd", { maxAutoLockRenewalDurationInMs: 0 });
    const [locked] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.equal(locked?.messageId, "bd-0");
    const [deferred] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    await receiver.deferMessage(deferred!);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const cutoff = new Date();
    await new Promise((resolve) => setTimeout(resolve, 20));
    await sender.sendMessages({ body: 5, messageId: "bd-5" });

    const first = await managementRequest(fixture.broker.port, "bd", "com.microsoft:batch-delete-messages", {
      "message-count": int(2),
      "enqueued-time-utc": cutoff,
    });
    assert.equal(first.status, 200);
    assert.equal(first.body?.["message-count"], 2);
    // the deferred bd-1 and bd-2 went (the oldest eligible); bd-0 is locked, bd-5 came after the cutoff
    const rest = await managementRequest(fixture.broker.port, "bd", "com.microsoft:batch-delete-messages", {
      "message-count": int(500),
      "enqueued-time-utc": cutoff,
    });
    assert.equal(rest.body?.["message-count"], 2, "bd-3 and bd-4");
    const none = await managementRequest(fixture.broker.port, "bd", "com.microsoft:batch-delete-messages", {
      "message-count": int(10),
      "enqueued-time-utc": cutoff,
    });
    assert.equal(none.status, 204);
    const counts = fixture.broker.counts("bd");
    assert.deepEqual([counts.active, counts.locked, counts.deferred, counts.scheduled], [1, 1, 0, 1]);
    await receiver.completeMessage(locked);
    const [left] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    assert.equal(left?.messageId, "bd-5");
    await receiver.completeMessage(left);
    await receiver.close();
    await sender.close();
  });

  it("refuses a count outside 1 to 500, as Standard tier's quota", async () => {
    for (const count of [0, 501]) {
      const answer = await managementRequest(
        fixture.broker.port,
        "empty",
        "com.microsoft:batch-delete-messages",
        {
          "message-count": int(count),
        },
      );
      assert.equal(answer.status, 400);
      assert.equal(answer.condition, "com.microsoft:argument-out-of-range");
      assert.match(answer.description ?? "", /from 1 to 500/);
    }
  });
});
