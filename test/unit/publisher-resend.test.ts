import assert from "node:assert/strict";
import type { ServiceBusClient, ServiceBusMessage } from "@azure/service-bus";
import { createPublisher } from "../../src/servicebus/publisher.ts";

/** A scripted sender: the SDK's own retries are its business; this checks the publisher's resend on top. */
function scriptedClient(failures: Error[]): { client: ServiceBusClient; sent: ServiceBusMessage[][] } {
  const sent: ServiceBusMessage[][] = [];
  const sender = {
    sendMessages(messages: ServiceBusMessage | ServiceBusMessage[]) {
      const failure = failures.shift();
      if (failure) return Promise.reject(failure);
      sent.push(Array.isArray(messages) ? messages : [messages]);
      return Promise.resolve();
    },
    close: () => Promise.resolve(),
  };
  return { client: { createSender: () => sender } as unknown as ServiceBusClient, sent };
}

describe("publisher resend", function () {
  const noSleep = () => Promise.resolve();
  const transient = Object.assign(new Error("service busy"), {
    name: "ServiceBusError",
    code: "ServiceBusy",
    retryable: true,
  });

  it("resends the same message, with the same MessageId, after a transient failure", async function () {
    const { client, sent } = scriptedClient([transient, transient]);
    const publisher = createPublisher({ client, queue: "q", sleep: noSleep });
    const { messageId } = await publisher.publish("T", "k", { a: 1 });
    assert.equal(sent.length, 1);
    assert.equal(sent[0]?.[0]?.messageId, messageId);
  });

  it("gives up after its attempts, and never resends a permanent failure", async function () {
    const many = scriptedClient([transient, transient, transient, transient, transient]);
    await assert.rejects(
      createPublisher({ client: many.client, queue: "q", sleep: noSleep, resendAttempts: 3 }).publish(
        "T",
        "k",
        {},
      ),
      /service busy/,
    );
    assert.equal(many.sent.length, 0);
    const permanent = Object.assign(new Error("too big"), { code: "MessageSizeExceeded", retryable: false });
    const once = scriptedClient([permanent]);
    await assert.rejects(
      createPublisher({ client: once.client, queue: "q", sleep: noSleep }).publish("T", "k", {}),
      /too big/,
    );
  });

  it("refuses a body that is not JSON-serialisable", async function () {
    const { client } = scriptedClient([]);
    await assert.rejects(
      createPublisher({ client, queue: "q" }).publish("T", "k", undefined),
      /not JSON-serialisable/,
    );
  });
});
