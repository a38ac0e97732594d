// `npm run bench:broker`: throughput of the local broker through the real SDK on loopback. The broker runs in a
// child process so its CPU time can be set against the client's. Prints send rates and the receive-and-complete
// rate at maxConcurrentCalls 16 (target: 2,000 messages/s or more, with the broker using less CPU than the client).
// A benchmark, not a test: it asserts nothing; the figures are for reading.
import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ServiceBusClient, type ServiceBusMessage } from "@azure/service-bus";
import { LocalBroker } from "../src/localbroker/broker.ts";
import { parseConfig } from "../src/localbroker/config.ts";

const QUEUE = "bench";
const ARRAY_MESSAGES = 20_000;
const SINGLE_MESSAGES = 5_000;
const SINGLE_IN_FLIGHT = 32;
const CONCURRENT_CALLS = 16;

type CpuReply = { user: number; system: number };

/** Child mode: serve one queue configured as sbinbox's (duplicate detection on) and answer CPU queries. */
async function serve(): Promise<void> {
  const config = parseConfig({
    UserConfig: {
      Namespaces: [
        { Name: "bench", Queues: [{ Name: QUEUE, Properties: { RequiresDuplicateDetection: true } }] },
      ],
    },
  });
  const broker = await LocalBroker.start({ port: 0, config });
  process.on("message", (request) => {
    if (request === "cpu") process.send?.(process.cpuUsage());
    if (request === "stop") void broker.stop().then(() => process.exit(0));
  });
  process.send?.({ connectionString: broker.connectionString });
}

function ask<T>(child: ChildProcess, request: string): Promise<T> {
  return new Promise((resolve) => {
    child.once("message", (reply) => resolve(reply as T));
    child.send(request);
  });
}

const cpuMs = (c: CpuReply): number => (c.user + c.system) / 1000;

async function measure(
  child: ChildProcess,
  label: string,
  count: number,
  work: () => Promise<void>,
): Promise<void> {
  const brokerBefore = await ask<CpuReply>(child, "cpu");
  const clientBefore = process.cpuUsage();
  const start = performance.now();
  await work();
  const seconds = (performance.now() - start) / 1000;
  const brokerCpu = cpuMs(await ask<CpuReply>(child, "cpu")) - cpuMs(brokerBefore);
  const clientCpu = cpuMs(process.cpuUsage(clientBefore));
  const rate = Math.round(count / seconds);
  console.log(
    `${label.padEnd(44)} ${String(count).padStart(6)} msgs ${seconds.toFixed(2).padStart(6)} s ` +
      `${String(rate).padStart(6)} msg/s | CPU broker ${Math.round(brokerCpu)} ms, client ${Math.round(clientCpu)} ms ` +
      `(broker/client ${(brokerCpu / clientCpu).toFixed(2)})`,
  );
}

function message(i: number, prefix: string): ServiceBusMessage {
  return {
    body: { orderId: i, amount: 10.5, note: "benchmark" },
    messageId: `${prefix}-${i}`,
    contentType: "application/json",
  };
}

async function main(): Promise<void> {
  const child = fork(fileURLToPath(import.meta.url), ["--serve"], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const { connectionString } = await new Promise<{ connectionString: string }>((resolve) =>
    child.once("message", (m) => resolve(m as { connectionString: string })),
  );
  const client = new ServiceBusClient(connectionString);
  const sender = client.createSender(QUEUE);
  await sender.sendMessages(message(-1, "warm")); // opens the link outside the timed part
  console.log(`node ${process.version}; broker pid ${child.pid}; queue "${QUEUE}" with duplicate detection`);

  await measure(child, "send, arrays of 100", ARRAY_MESSAGES, async () => {
    for (let start = 0; start < ARRAY_MESSAGES; start += 100) {
      const batch: ServiceBusMessage[] = [];
      for (let i = start; i < start + 100; i++) batch.push(message(i, "array"));
      await sender.sendMessages(batch);
    }
  });
  await measure(child, `send, single messages, ${SINGLE_IN_FLIGHT} in flight`, SINGLE_MESSAGES, async () => {
    let next = 0;
    const lane = async (): Promise<void> => {
      while (next < SINGLE_MESSAGES) await sender.sendMessages(message(next++, "single"));
    };
    await Promise.all(Array.from({ length: SINGLE_IN_FLIGHT }, lane));
  });

  const total = ARRAY_MESSAGES + SINGLE_MESSAGES + 1;
  const receiver = client.createReceiver(QUEUE);
  await measure(child, `receive + complete, maxConcurrentCalls ${CONCURRENT_CALLS}`, total, async () => {
    let done = 0;
    await new Promise<void>((resolve, reject) => {
      receiver.subscribe(
        {
          processMessage: async (m) => {
            await receiver.completeMessage(m);
            if (++done === total) resolve();
          },
          processError: (args) => {
            reject(args.error);
            return Promise.resolve();
          },
        },
        { autoCompleteMessages: false, maxConcurrentCalls: CONCURRENT_CALLS },
      );
    });
  });
  await receiver.close();
  await sender.close();
  await client.close();
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.send("stop");
  await exited;
}

if (process.argv.includes("--serve")) await serve();
else await main();
