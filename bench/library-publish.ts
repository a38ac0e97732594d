// A publisher row of `npm run bench`: an upstream service sending through the library, `publishBatch` of `chunk`
// events per call, one call after another. `node bench/library-publish.ts <connection string> <queue> <count> <chunk>`
import { randomUUID } from "node:crypto";
import { createPublisher } from "../src/publisher.ts";

const [connectionString, queue, countText, chunkText] = process.argv.slice(2);
const count = Number(countText);
const chunk = Number(chunkText ?? 1000);
const started = performance.now();
const publisher = createPublisher({ queue: queue!, connection: { connectionString: connectionString! } });
const runId = randomUUID().slice(0, 8);
for (let from = 0; from < count; from += chunk) {
  const events = [];
  for (let i = from; i < Math.min(count, from + chunk); i += 1) {
    events.push({
      type: "AccountCredited",
      key: `${runId}-${i}`,
      body: { accountId: `acc-${i % 50}`, amount: (i % 100) + 1, reference: `demo ${runId} #${i}` },
    });
  }
  await publisher.publishBatch(events);
}
await publisher.close();
process.stdout.write(`sent ${count} in ${((performance.now() - started) / 1000).toFixed(3)} s\n`);
