// The baseline of `npm run bench`'s publisher rows: what a service would write with @azure/service-bus alone.
// `node bench/plain-sdk-publish.ts <connection string> <queue> <count> [--derived]`: JSON bodies like the demo
// events', random MessageIds (with --derived: sbinbox's derived ones, to separate their cost from the rest), batches
// filled to the size limit and sent one after another. Prints the send phase's time.
// `node bench/plain-sdk-publish.ts <connection string> <queue> --file <events.jsonl>`: the same for a JSON-lines file
// of sbinbox events ({"type", "key", "body"}), streamed with readline, each body sent as its JSON with a random
// MessageId: the baseline of `sbinbox publish --file` (which also checks the file first and derives the ids).
import { randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";
import { ServiceBusClient, type ServiceBusMessage } from "@azure/service-bus";
import { deriveMessageId } from "../src/servicebus/message-id.ts";

const [connectionString, queue, countText, flag] = process.argv.slice(2);
const derived = flag === "--derived";
const file = countText === "--file" ? flag! : undefined;
const count = file === undefined ? Number(countText) : 0;
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
const add = async (m: ServiceBusMessage): Promise<void> => {
  if (batch.tryAddMessage(m)) return;
  await sender.sendMessages(batch);
  batch = await sender.createMessageBatch();
  if (!batch.tryAddMessage(m)) throw new Error("a message larger than a batch");
};
let sent = count;
if (file === undefined) {
  for (let i = 0; i < count; i += 1) {
    const m = message(i);
    if (!batch.tryAddMessage(m)) await add(m);
  }
} else {
  for await (const line of createInterface({ input: createReadStream(file, "utf8"), crlfDelay: Infinity })) {
    if (line.trim() === "") continue;
    const e = JSON.parse(line) as { type: string; body: unknown };
    const m = {
      messageId: randomUUID(),
      subject: e.type,
      contentType: "application/json",
      body: Buffer.from(JSON.stringify(e.body)),
    };
    if (!batch.tryAddMessage(m)) await add(m);
    sent += 1;
  }
}
if (batch.count > 0) await sender.sendMessages(batch);
await sender.close();
await client.close();
process.stdout.write(`sent ${sent} in ${((performance.now() - started) / 1000).toFixed(3)} s\n`);
