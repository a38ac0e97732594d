/**
 * The publisher alone (`sbinbox/publisher`), for upstream services that only publish: it loads neither the worker,
 * the database drivers nor the local broker. Nothing here runs at import time.
 */
export {
  createPublisher,
  ResendWindowError,
  sendInBatches,
  toServiceBusMessage,
} from "./servicebus/publisher.ts";
export type {
  Publisher,
  PublisherOptions,
  PublishAllOptions,
  PublishEvent,
  PublishResult,
  SendInBatchesOptions,
} from "./servicebus/publisher.ts";
export { deriveMessageId, canonicalName, uuidV5, MESSAGE_ID_NAMESPACE } from "./servicebus/message-id.ts";
export { createServiceBusClient, type ServiceBusClient, type ServiceBusTarget } from "./servicebus/client.ts";
// The outbox's enqueue writes through the caller's own transaction; it loads no driver of its own.
export { enqueue, type OutboxEvent, type OutboxTransaction, type EnqueueResult } from "./outbox/enqueue.ts";
