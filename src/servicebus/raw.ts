import type { ServiceBusClient } from "@azure/service-bus";

/** A message exactly as given, for the demo's and tests' deliberately broken (poison) messages. */
export interface RawMessage {
  readonly messageId: string;
  readonly body: Buffer;
  readonly subject?: string;
  readonly contentType?: string;
  /** On a session-enabled entity, which refuses a message without one. */
  readonly sessionId?: string;
  readonly applicationProperties?: Record<string, string | number | boolean>;
}

export async function sendRawMessages(
  client: ServiceBusClient,
  queue: string,
  messages: readonly RawMessage[],
): Promise<void> {
  const sender = client.createSender(queue);
  try {
    await sender.sendMessages(messages.map((m) => ({ ...m })));
  } finally {
    await sender.close();
  }
}
