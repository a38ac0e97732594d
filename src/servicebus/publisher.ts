import {
  isServiceBusError,
  type ServiceBusClient,
  type ServiceBusMessage,
  type ServiceBusSender,
} from "@azure/service-bus";
import { context } from "@opentelemetry/api";
import { deriveMessageId } from "./message-id.ts";
import { createServiceBusClient, type ServiceBusTarget } from "./client.ts";
import { endSpan, injectTraceContext, startSendSpan } from "./tracing.ts";

/** One event: its type (the message's subject), its business key, and a JSON-serialisable body. */
export interface PublishEvent {
  readonly type: string;
  readonly key: string;
  readonly body: unknown;
  /** Extra application properties; `traceparent` and `Diagnostic-Id` are set by the publisher. */
  readonly properties?: Readonly<Record<string, string | number | boolean>>;
  readonly correlationId?: string;
}

export interface PublishResult {
  readonly messageId: string;
}

export interface Publisher {
  readonly queue: string;
  publish(type: string, key: string, body: unknown, options?: Partial<PublishEvent>): Promise<PublishResult>;
  publishBatch(events: readonly PublishEvent[]): Promise<PublishResult[]>;
  close(): Promise<void>;
}

export interface PublisherOptions {
  readonly queue: string;
  /** An existing client (not closed by the publisher), or where to connect (closed by `close`). */
  readonly client?: ServiceBusClient;
  readonly connection?: ServiceBusTarget;
  /**
   * Resends after the SDK's own retries give up on a transient error. Safe: the MessageId is derived from the
   * event, so the broker's duplicate detection drops any copy that did arrive. Default 3.
   */
  readonly resendAttempts?: number;
  readonly resendDelayMs?: number;
  /** Injectable for tests. */
  readonly sleep?: (ms: number) => Promise<void>;
}

/** Builds the message for an event: derived MessageId, subject = type, JSON as UTF-8 bytes. */
export function toServiceBusMessage(event: PublishEvent): ServiceBusMessage {
  const json = JSON.stringify(event.body);
  if (json === undefined)
    throw new TypeError(`the body of ${event.type}:${event.key} is not JSON-serialisable`);
  return {
    messageId: deriveMessageId(event.type, event.key),
    subject: event.type,
    contentType: "application/json",
    // Bytes (an AMQP data section), as the .NET and Python clients send them, so every consumer reads the same.
    body: Buffer.from(json, "utf8"),
    correlationId: event.correlationId,
    applicationProperties: { ...event.properties },
  };
}

export function createPublisher(options: PublisherOptions): Publisher {
  if (!options.client && !options.connection)
    throw new TypeError("createPublisher needs a client or a connection");
  const ownsClient = !options.client;
  const client = options.client ?? createServiceBusClient(options.connection!);
  const sender: ServiceBusSender = client.createSender(options.queue);
  const attempts = options.resendAttempts ?? 3;
  const delayMs = options.resendDelayMs ?? 500;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));

  async function withResend(send: () => Promise<void>): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await send();
      } catch (error) {
        if (attempt >= attempts || !isTransient(error)) throw error;
        await sleep(delayMs * 2 ** attempt);
      }
    }
  }

  async function sendTraced(messages: ServiceBusMessage[]): Promise<void> {
    const { span, ctx } = startSendSpan(
      options.queue,
      messages.length,
      messages.length === 1 ? String(messages[0]!.messageId) : undefined,
    );
    try {
      for (const m of messages) injectTraceContext(ctx, (m.applicationProperties ??= {}));
      await context.with(ctx, () => withResend(() => sendInBatches(sender, messages)));
      endSpan(span);
    } catch (error) {
      endSpan(span, error);
      throw error;
    }
  }

  return {
    queue: options.queue,
    async publish(type, key, body, extra = {}) {
      const message = toServiceBusMessage({ ...extra, type, key, body });
      await sendTraced([message]);
      return { messageId: String(message.messageId) };
    },
    async publishBatch(events) {
      const messages = events.map(toServiceBusMessage);
      if (messages.length > 0) await sendTraced(messages);
      return messages.map((m) => ({ messageId: String(m.messageId) }));
    },
    async close() {
      await sender.close();
      if (ownsClient) await client.close();
    },
  };
}

/** Fills size-limited batches in order and sends each; a message too large for an empty batch is an error. */
async function sendInBatches(
  sender: ServiceBusSender,
  messages: readonly ServiceBusMessage[],
): Promise<void> {
  if (messages.length === 1) return sender.sendMessages(messages[0]!);
  let batch = await sender.createMessageBatch();
  for (const message of messages) {
    if (batch.tryAddMessage(message)) continue;
    if (batch.count === 0)
      throw new RangeError(`message ${String(message.messageId)} is larger than a batch may be`);
    await sender.sendMessages(batch);
    batch = await sender.createMessageBatch();
    if (!batch.tryAddMessage(message)) {
      throw new RangeError(`message ${String(message.messageId)} is larger than a batch may be`);
    }
  }
  if (batch.count > 0) await sender.sendMessages(batch);
}

function isTransient(error: unknown): boolean {
  if (isServiceBusError(error)) return error.retryable;
  const e = error as { retryable?: unknown; code?: unknown } | undefined;
  return (
    e?.retryable === true || ["ECONNRESET", "ECONNREFUSED", "ETIMEDOUT", "EPIPE"].includes(String(e?.code))
  );
}
