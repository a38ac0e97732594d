import { isServiceBusError } from "@azure/service-bus";
import { createServiceBusClient, type ServiceBusTarget } from "./client.ts";
import { createEntityReceiver } from "./entity-receiver.ts";

/** Service Bus answered and said no: the entity is missing or disabled, or the identity may not use it. */
const REFUSING_CODES = new Set(["MessagingEntityNotFound", "MessagingEntityDisabled", "UnauthorizedAccess"]);

/**
 * One look at the queue, as the worker will use it: connect, authorize (CBS), open the queue's `$management`
 * link and peek one message, which needs the Listen right the receiver needs. On its own client with no SDK
 * retries, so one probe is one try: the caller owns the back-off (the SDK's default is 3 retries 30 s apart).
 */
export async function probeQueue(
  target: ServiceBusTarget,
  queue: string,
  options: { timeoutMs: number; signal?: AbortSignal },
): Promise<void> {
  const client = createServiceBusClient(target, {
    retryOptions: { maxRetries: 0, timeoutInMs: options.timeoutMs },
  });
  try {
    const receiver = createEntityReceiver(client, queue, { receiveMode: "peekLock" });
    await receiver.peekMessages(1, { abortSignal: options.signal });
  } finally {
    await client.close().catch(() => undefined);
  }
}

/**
 * One look at the queue as the outbox relay will use it: connect, authorize for Send and open the sender link
 * (createMessageBatch waits for it). Sends nothing, and needs no Listen right: the relay's identity has
 * Data Sender only. No SDK retries, as probeQueue.
 */
export async function probeSender(
  target: ServiceBusTarget,
  queue: string,
  options: { timeoutMs: number; signal?: AbortSignal },
): Promise<void> {
  const client = createServiceBusClient(target, {
    retryOptions: { maxRetries: 0, timeoutInMs: options.timeoutMs },
  });
  try {
    const sender = client.createSender(queue);
    await sender.createMessageBatch({ abortSignal: options.signal });
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** Service Bus refused (by the SDK's ServiceBusError code), as opposed to not answering at all. */
export function serviceBusRefused(error: unknown): boolean {
  return isServiceBusError(error) && REFUSING_CODES.has(error.code);
}
