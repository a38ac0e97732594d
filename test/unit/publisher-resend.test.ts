import assert from "node:assert/strict";
import type { ServiceBusClient, ServiceBusMessage } from "@azure/service-bus";
import { createPublisher, ResendWindowError } from "../../src/servicebus/publisher.ts";

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
  const dropped = Object.assign(new Error("connection dropped"), {
    name: "ServiceBusError",
    code: "ServiceCommunicationProblem",
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
    const many = scriptedClient([dropped, dropped, dropped, dropped, dropped]);
    await assert.rejects(
      createPublisher({ client: many.client, queue: "q", sleep: noSleep, resendAttempts: 3 }).publish(
        "T",
        "k",
        {},
      ),
      /connection dropped/,
    );
    assert.equal(many.sent.length, 0);
    const permanent = Object.assign(new Error("too big"), { code: "MessageSizeExceeded", retryable: false });
    const once = scriptedClient([permanent]);
    await assert.rejects(
      createPublisher({ client: once.client, queue: "q", sleep: noSleep }).publish("T", "k", {}),
      /too big/,
    );
  });

  it("waits Service Bus's 2 s, jittered to 1-3 s, after a throttled send (ServiceBusy), longer than its own first delay", async function () {
    const waits: number[] = [];
    const { client, sent } = scriptedClient([transient, transient, transient]);
    const sleep = (ms: number) => (waits.push(ms), Promise.resolve());
    await createPublisher({ client, queue: "q", sleep, resendDelayMs: 100 }).publish("T", "k", {});
    assert.equal(waits.length, 3);
    for (const wait of waits) assert.ok(wait >= 1_000 && wait <= 3_000, `waited ${wait} ms`);
    assert.equal(sent.length, 1);
  });

  it("does not spend its attempts on throttled sends: ten ServerBusy answers, then sent, with resendAttempts 1", async function () {
    const { client, sent } = scriptedClient(Array.from({ length: 10 }, () => transient));
    await createPublisher({ client, queue: "q", sleep: noSleep, resendAttempts: 1 }).publish("T", "k", {});
    assert.equal(sent.length, 1);
  });

  it("starts no resend that would fall outside the duplicate detection window (less a minute), and says so", async function () {
    const { client, sent } = scriptedClient([transient, transient]);
    // a 60.9 s window leaves 0.9 s for resends: the throttled send's 1-3 s wait would pass it
    const publisher = createPublisher({ client, queue: "q", sleep: noSleep, duplicateWindowMs: 60_900 });
    await assert.rejects(publisher.publish("T", "k", {}), (error: unknown) => {
      assert.ok(error instanceof ResendWindowError);
      assert.match(
        error.message,
        /outside the duplicate detection window \(60900 ms less a 60000 ms margin\)/,
      );
      assert.match(error.message, /service busy/);
      return true;
    });
    assert.equal(sent.length, 0);
  });

  it("refuses a body that is not JSON-serialisable", async function () {
    const { client } = scriptedClient([]);
    await assert.rejects(
      createPublisher({ client, queue: "q" }).publish("T", "k", undefined),
      /not JSON-serialisable/,
    );
  });
});
