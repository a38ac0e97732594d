import assert from "node:assert/strict";
import type { ServiceBusReceiver, ServiceBusSender } from "@azure/service-bus";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";

async function sendNumbered(sender: ServiceBusSender, prefix: string, count: number): Promise<void> {
  for (let start = 0; start < count; start += 100) {
    const messages = [];
    for (let i = start; i < Math.min(count, start + 100); i++)
      messages.push({ body: { i }, messageId: `${prefix}-${i}` });
    await sender.sendMessages(messages);
  }
}

function collect(
  receiver: ServiceBusReceiver,
  ids: string[],
  maxConcurrentCalls: number,
): { close(): Promise<void> } {
  return receiver.subscribe(
    {
      processMessage: async (message) => {
        await receiver.completeMessage(message);
        ids.push(String(message.messageId));
      },
      processError: (args) => Promise.reject(args.error),
    },
    { autoCompleteMessages: false, maxConcurrentCalls },
  );
}

describe("local broker: competing receivers and volume", () => {
  const fixture = useLocalBroker(brokerConfig({ load: { RequiresDuplicateDetection: true } }));

  it("two competing receivers on 1,000 messages each get distinct ones and none is lost", async () => {
    const sender = fixture.client.createSender("load");
    await sendNumbered(sender, "compete", 1000);
    await sender.close();
    const a = fixture.client.createReceiver("load");
    const b = fixture.client.createReceiver("load");
    const idsA: string[] = [];
    const idsB: string[] = [];
    const subA = collect(a, idsA, 8);
    const subB = collect(b, idsB, 8);
    await waitUntil(() => idsA.length + idsB.length >= 1000, "1,000 messages were received", 30_000);
    await subA.close();
    await subB.close();
    await a.close();
    await b.close();
    const all = new Set([...idsA, ...idsB]);
    assert.equal(idsA.length + idsB.length, 1000, "no message delivered twice");
    assert.equal(all.size, 1000, "every message delivered");
    assert.ok(
      idsA.length > 0 && idsB.length > 0,
      `both receivers got work (${idsA.length} / ${idsB.length})`,
    );
    const counts = fixture.broker.counts("load");
    assert.equal(counts.active + counts.locked, 0);
  });

  it("more than 2,048 messages pass through one peek-lock subscription", async () => {
    const sender = fixture.client.createSender("load");
    await sendNumbered(sender, "many", 2600);
    await sender.close();
    const receiver = fixture.client.createReceiver("load");
    const ids: string[] = [];
    const subscription = collect(receiver, ids, 16);
    await waitUntil(() => ids.length >= 2600, "2,600 messages were received", 60_000);
    await subscription.close();
    await receiver.close();
    assert.equal(new Set(ids).size, 2600);
    const counts = fixture.broker.counts("load");
    assert.equal(counts.active + counts.locked, 0);
  });
});
