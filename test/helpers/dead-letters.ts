import type { ServiceBusClient } from "@azure/service-bus";
import { sendRawMessages } from "../../src/servicebus/raw.ts";

/**
 * Fills a queue's dead-letter queue through the SDK, as the worker would: `count` messages d-<n> of subject
 * `typeOf(n)`, each received and dead-lettered with reason `reasonOf(n)`, in sequence order. Sends a batch at a
 * time, so 10,000 take seconds rather than minutes.
 */
export async function deadLetterMany(
  client: ServiceBusClient,
  queue: string,
  count: number,
  reasonOf: (n: number) => string,
  typeOf: (n: number) => string = () => "X",
  from = 0,
): Promise<void> {
  const BATCH = 500;
  for (let i = from; i < from + count; i += BATCH) {
    const size = Math.min(BATCH, from + count - i);
    await sendRawMessages(
      client,
      queue,
      Array.from({ length: size }, (_, j) => ({
        messageId: `d-${i + j}`,
        subject: typeOf(i + j),
        body: Buffer.from(JSON.stringify({ n: i + j })),
      })),
    );
  }
  const receiver = client.createReceiver(queue);
  try {
    for (let moved = 0; moved < count;) {
      const batch = await receiver.receiveMessages(BATCH, { maxWaitTimeInMs: 2_000 });
      if (batch.length === 0) throw new Error(`only ${moved} of ${count} dead-lettered: the queue ran dry`);
      // One at a time: settled side by side, rhea merges consecutive dispositions of one outcome into a range,
      // and the broker gives them all the first one's reason.
      for (const m of batch)
        await receiver.deadLetterMessage(m, {
          deadLetterReason: reasonOf(Number(String(m.messageId).slice(2))),
          deadLetterErrorDescription: "set up by the test",
        });
      moved += batch.length;
    }
  } finally {
    await receiver.close();
  }
}
