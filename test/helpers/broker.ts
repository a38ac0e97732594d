import { ServiceBusClient, type ServiceBusReceivedMessage } from "@azure/service-bus";
import { parseConfig, type BrokerConfig } from "../../src/localbroker/config.ts";
import { LocalBroker } from "../../src/localbroker/broker.ts";

export interface BrokerFixture {
  readonly broker: LocalBroker;
  readonly client: ServiceBusClient;
}

/**
 * Starts one local broker on a free port for the enclosing `describe` (and a ServiceBusClient connected to
 * it), stopped after its tests. Call it at the top of a describe block.
 */
export function useLocalBroker(config?: BrokerConfig, options: { now?: () => number } = {}): BrokerFixture {
  let broker: LocalBroker | undefined;
  let client: ServiceBusClient | undefined;
  before(async () => {
    broker = await LocalBroker.start({ port: 0, host: "127.0.0.1", config, now: options.now });
    client = new ServiceBusClient(broker.connectionString, {
      retryOptions: { maxRetries: 1, timeoutInMs: 10_000 },
    });
  });
  after(async () => {
    await client?.close();
    await broker?.stop();
  });
  return {
    get broker() {
      if (!broker) throw new Error("broker not started yet: use it inside a test or hook");
      return broker;
    },
    get client() {
      if (!client) throw new Error("client not started yet: use it inside a test or hook");
      return client;
    },
  };
}

/** A config in the emulator's Config.json shape, one queue per entry: name -> Properties. */
export function brokerConfig(queues: Record<string, Record<string, unknown>>): BrokerConfig {
  return parseConfig({
    UserConfig: {
      Namespaces: [
        { Name: "test", Queues: Object.entries(queues).map(([Name, Properties]) => ({ Name, Properties })) },
      ],
    },
  });
}

/** Resolves when `condition` holds, polling briefly; rejects with `what` after `timeoutMs`. */
export async function waitUntil(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Takes (receive-and-delete) what a queue's dead-letter queue holds: at most `max`, waiting at most `waitMs`. */
export async function takeDeadLetters(
  client: ServiceBusClient,
  queue: string,
  max = 50,
  waitMs = 300,
): Promise<ServiceBusReceivedMessage[]> {
  const dlq = client.createReceiver(queue, { subQueueType: "deadLetter", receiveMode: "receiveAndDelete" });
  try {
    return await dlq.receiveMessages(max, { maxWaitTimeInMs: waitMs });
  } finally {
    await dlq.close();
  }
}
