// The baseline of `npm run bench`'s publisher rows: what a service would write with @azure/service-bus alone.
// `node bench/plain-sdk-publish.ts <connection string> <queue> <count> [--derived]`: JSON bodies like the demo
// events', random MessageIds (with --derived: sbinbox's derived ones, to separate their cost from the rest), batches
// filled to the size limit and sent one after another. Prints the send phase's time.
import { randomUUID } from "node:crypto";
import { ServiceBusClient } from "@azure/service-bus";
import { deriveMessageId } from "../src/servicebus/message-id.ts";

const [connectionString, queue, countText, flag] = process.argv.slice(2);
const derived = flag === "--derived";
const count = Number(countText);
const started = performance.now();
const client = new ServiceBusClient(connectionString!);
const sender = client.createSender(queue!);
const runId = randomUUID().slice(0, 8);
const message = (i: number) => ({
  messageId: derived ? deriveMessageId("AccountCredited", `${runId}-${i}`) : randomUUID(),
  subject: "AccountCredited",
  contentType: "application/json",
  body: Buffer.from(
    JSON.stringify({ accountId: `acc-${i % 50}`, amount: (i % 100) + 1, reference: `demo ${runId} #${i}` }),
  ),
});
let batch = await sender.createMessageBatch();
for (let i = 0; i < count; i += 1) {
  const m = message(i);
  if (batch.tryAddMessage(m)) continue;
  await sender.sendMessages(batch);
  batch = await sender.createMessageBatch();
  if (!batch.tryAddMessage(m)) throw new Error("a message larger than a batch");
}
if (batch.count > 0) await sender.sendMessages(batch);
await sender.close();
await client.close();
process.stdout.write(`sent ${count} in ${((performance.now() - started) / 1000).toFixed(3)} s\n`);
