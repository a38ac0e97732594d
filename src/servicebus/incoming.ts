import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import type { IncomingMessage } from "../domain/envelope.ts";

/** What the worker sees of a received message: its id as text, its session id when it has one. */
export function toIncoming(message: ServiceBusReceivedMessage): IncomingMessage {
  return {
    messageId: messageIdText(message.messageId),
    body: message.body as unknown,
    contentType: message.contentType,
    subject: message.subject,
    correlationId: message.correlationId === undefined ? undefined : String(message.correlationId),
    deliveryCount: message.deliveryCount ?? 0,
    enqueuedTime: message.enqueuedTimeUtc,
    lockedUntil: message.lockedUntilUtc,
    ...(message.sessionId !== undefined ? { sessionId: message.sessionId } : {}),
    ...(message.partitionKey !== undefined ? { partitionKey: message.partitionKey } : {}),
    applicationProperties: message.applicationProperties ?? {},
  };
}

function messageIdText(id: ServiceBusReceivedMessage["messageId"]): string {
  if (id === undefined || id === null) return "";
  if (Buffer.isBuffer(id)) return id.toString("hex");
  return String(id);
}
