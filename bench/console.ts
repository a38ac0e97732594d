// `npm run bench:console`: the console over a large dead-letter queue, through the real SDK to the local broker (in
// this process, so its encoding shares the one thread: the figures are pessimistic). Fills the dead-letter queue with
// N dead letters of six reasons (default 100,000; `node bench/console.ts 10000` for fewer), the newest reason last,
// then prints how long the first page takes on a cold console, a count of every dead letter per reason, a page of the
// newest reason past all the others, and a page read again from the kept index. A benchmark, not a test: it asserts
// nothing; the figures are for reading.
import { loadavg } from "node:os";
import { ServiceBusClient } from "@azure/service-bus";
import { createConsoleService } from "../src/console/service.ts";
import { LocalBroker } from "../src/localbroker/broker.ts";
import { parseConfig } from "../src/localbroker/config.ts";
import { sendRawMessages } from "../src/servicebus/raw.ts";

const QUEUE = "bench-console";
const N = Number(process.argv[2] ?? 100_000);
const REASONS = [
  "RetriesExhausted",
  "SchemaViolation",
  "NotRetryable",
  "UnknownMessageType",
  "Poison",
  "Newest",
];
const BATCH = 500;

/** The reason of the n-th dead letter: the first five spread over all but the last 1%, then the newest. */
const reasonOf = (n: number) => (n >= N * 0.99 ? REASONS[5]! : REASONS[n % 5]!);

async function fill(client: ServiceBusClient): Promise<void> {
  for (let i = 0; i < N; i += BATCH)
    await sendRawMessages(
      client,
      QUEUE,
      Array.from({ length: Math.min(BATCH, N - i) }, (_, j) => ({
        messageId: `d-${i + j}`,
        subject: "Order",
        body: Buffer.from(JSON.stringify({ order: i + j, customer: "c-1", lines: [1, 2, 3] })),
      })),
    );
  const receiver = client.createReceiver(QUEUE);
  try {
    for (let moved = 0; moved < N;) {
      const batch = await receiver.receiveMessages(BATCH, { maxWaitTimeInMs: 2_000 });
      // One at a time: rhea merges side-by-side dispositions of one outcome, and the reasons would blur.
      for (const m of batch)
        await receiver.deadLetterMessage(m, {
          deadLetterReason: reasonOf(Number(String(m.messageId).slice(2))),
          deadLetterErrorDescription: "bench",
        });
      moved += batch.length;
    }
  } finally {
    await receiver.close();
  }
}

async function timed<T>(label: string, work: () => Promise<T>, describe: (value: T) => string): Promise<T> {
  const start = performance.now();
  const value = await work();
  const ms = performance.now() - start;
  console.log(`${label.padEnd(52)} ${ms.toFixed(0).padStart(7)} ms  ${describe(value)}`);
  return value;
}

async function main(): Promise<void> {
  const config = parseConfig({
    UserConfig: {
      Namespaces: [{ Name: "bench", Queues: [{ Name: QUEUE, Properties: { MaxDeliveryCount: 100 } }] }],
    },
  });
  const broker = await LocalBroker.start({ port: 0, config });
  const client = new ServiceBusClient(broker.connectionString);
  try {
    const fillStart = performance.now();
    await fill(client);
    console.log(`filled ${N} dead letters in ${((performance.now() - fillStart) / 1000).toFixed(1)} s`);
    const service = createConsoleService({ client, entity: QUEUE });
    await timed(
      "first page, cold console (50 rows)",
      () => service.messages({}, 0, 50),
      (p) => `${p.messages.length} rows of ${p.total ?? "(still counting)"}`,
    );
    await timed(
      "count every dead letter per reason (fresh full peek)",
      () => service.state({ fresh: true }),
      (s) => `${s.deadLettered} dead letters: ${s.reasons.map((r) => `${r.name} ${r.count}`).join(", ")}`,
    );
    await timed(
      "page of the newest reason, past all others",
      () => service.messages({ reason: "Newest" }, 0, 50),
      (p) => `${p.messages.length} rows of ${p.total}, first ${p.messages[0]?.messageId}`,
    );
    await timed(
      "page 1,000 from the kept index",
      () => service.messages({}, 49_950, 50),
      (p) => `${p.messages.length} rows, first ${p.messages[0]?.messageId}`,
    );
    console.log(
      `load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(" ")}`,
    );
  } finally {
    await client.close();
    await broker.stop();
  }
}

await main();
