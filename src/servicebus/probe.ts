import { isServiceBusError, type ServiceBusClient } from "@azure/service-bus";
import { createServiceBusClient, type ServiceBusTarget } from "./client.ts";
import { createEntityReceiver } from "./entity-receiver.ts";

/** Service Bus answered and said no: the entity is missing or disabled, or the identity may not use it. */
const REFUSING_CODES = new Set(["MessagingEntityNotFound", "MessagingEntityDisabled", "UnauthorizedAccess"]);

/**
 * One look at the queue, as the worker will use it: connect, authorize (CBS), open the queue's `$management`
 * link and peek one message, which needs the Listen right the receiver needs. On its own client with no SDK
 * retries, so one probe is one try: the caller owns the back-off (the SDK's default is 3 retries 30 s apart).
 */
export function probeQueue(target: ServiceBusTarget, queue: string, options: ProbeOptions): Promise<void> {
  return probe(target, options, (client, abortSignal) =>
    createEntityReceiver(client, queue, { receiveMode: "peekLock" }).peekMessages(1, { abortSignal }),
  );
}

/**
 * One look at the queue as the outbox relay will use it: connect, authorize for Send and open the sender link
 * (createMessageBatch waits for it). Sends nothing, and needs no Listen right: the relay's identity has
 * Data Sender only. No SDK retries, as probeQueue.
 */
export function probeSender(target: ServiceBusTarget, queue: string, options: ProbeOptions): Promise<void> {
  return probe(target, options, (client, abortSignal) =>
    client.createSender(queue).createMessageBatch({ abortSignal }),
  );
}

interface ProbeOptions {
  timeoutMs: number;
  signal?: AbortSignal;
}

/** One try of `look` on a client of its own, closed after either way. */
async function probe(
  target: ServiceBusTarget,
  options: ProbeOptions,
  look: (client: ServiceBusClient, signal: AbortSignal | undefined) => Promise<unknown>,
): Promise<void> {
  const client = createServiceBusClient(target, {
    retryOptions: { maxRetries: 0, timeoutInMs: options.timeoutMs },
  });
  try {
    await look(client, options.signal);
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** Service Bus refused (by the SDK's ServiceBusError code), as opposed to not answering at all. */
export function serviceBusRefused(error: unknown): boolean {
  return isServiceBusError(error) && REFUSING_CODES.has(error.code);
}
