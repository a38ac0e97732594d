import type { ServiceBusMessage, ServiceBusReceivedMessage } from "@azure/service-bus";
import { CopyProperty } from "../domain/envelope.ts";

/**
 * Broker-set properties that describe the old message's fate, not the copy's, and the claim id of the attempt that
 * sent the old message: a copy re-enters a claim only when its sender says so (a replay starts afresh).
 */
const DROPPED_PROPERTIES = new Set<string>([
  "DeadLetterReason",
  "DeadLetterErrorDescription",
  "DeadLetterSource",
  CopyProperty.claimId,
]);

/**
 * A copy of a received message for sending again (a scheduled retry, a replay from the dead-letter queue): the
 * same body, content type, subject, correlation and application properties, a new MessageId, and `properties`
 * written over the original's. The trace context goes along, so the copy's processing links to the first send.
 */
export function copyOf(
  message: ServiceBusReceivedMessage,
  messageId: string,
  properties: Readonly<Record<string, string | number>>,
  scheduledEnqueueTimeUtc?: Date,
): ServiceBusMessage {
  const applicationProperties: Record<string, number | boolean | string | Date | null> = {};
  for (const [name, value] of Object.entries(message.applicationProperties ?? {})) {
    if (!DROPPED_PROPERTIES.has(name)) applicationProperties[name] = value;
  }
  Object.assign(applicationProperties, properties);
  return {
    messageId,
    body: message.body as unknown,
    contentType: message.contentType,
    subject: message.subject,
    correlationId: message.correlationId,
    sessionId: message.sessionId,
    partitionKey: message.partitionKey,
    replyTo: message.replyTo,
    replyToSessionId: message.replyToSessionId,
    to: message.to,
    applicationProperties,
    ...(scheduledEnqueueTimeUtc ? { scheduledEnqueueTimeUtc } : {}),
  };
}
