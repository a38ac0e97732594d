import {
  isServiceBusError,
  type ServiceBusClient,
  type ServiceBusMessage,
  type ServiceBusMessageBatch,
  type ServiceBusSender,
} from "@azure/service-bus";
import { context } from "@opentelemetry/api";
import { Attr } from "../telemetry/names.ts";
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

export interface PublishAllOptions {
  /** Called after each batch the broker acknowledged, with its number of events, in the order they were read. */
  readonly onSent?: (count: number) => void;
}

export interface Publisher {
  readonly queue: string;
  publish(type: string, key: string, body: unknown, options?: Partial<PublishEvent>): Promise<PublishResult>;
  /** Sends the events in order, in batches filled to the size limit; one result per event, in the same order. */
  publishBatch(events: readonly PublishEvent[]): Promise<PublishResult[]>;
  /**
   * Sends a stream of events as `publishBatch` does, holding at most the batches in flight in memory (a file of
   * any size). Resolves with the number sent. On failure, what `onSent` reported has been acknowledged.
   */
  publishAll(
    events: Iterable<PublishEvent> | AsyncIterable<PublishEvent>,
    options?: PublishAllOptions,
  ): Promise<number>;
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
  /**
   * Batches sent and not yet acknowledged, at most. 1 (the default) keeps the order of the events even across a
   * resend, and still fills the next batch while one is in flight. Above 1 a resent batch lands after later ones.
   */
  readonly maxInFlight?: number;
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
    // Absent rather than empty: an empty map is still encoded, per message, by the SDK.
    ...(event.correlationId !== undefined ? { correlationId: event.correlationId } : {}),
    ...(event.properties ? { applicationProperties: { ...event.properties } } : {}),
  };
}

export function createPublisher(options: PublisherOptions): Publisher {
  if (!options.client && !options.connection)
    throw new TypeError("createPublisher needs a client or a connection");
  const maxInFlight = options.maxInFlight ?? 1;
  if (!Number.isInteger(maxInFlight) || maxInFlight < 1)
    throw new RangeError(`maxInFlight must be a positive whole number (got ${String(options.maxInFlight)})`);
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

  /**
   * One PRODUCER span per call; its context goes into every message of the call. The trace properties are built
   * once and copied into each message, not injected through the propagator per message.
   */
  async function sendTraced(
    messages: Iterable<ServiceBusMessage> | AsyncIterable<ServiceBusMessage>,
    known: { count: number; messageId?: string },
    onSent?: (count: number) => void,
  ): Promise<number> {
    const { span, ctx } = startSendSpan(options.queue, known.count, known.messageId);
    const trace: Record<string, string> = {};
    injectTraceContext(ctx, trace);
    const traced = Object.keys(trace).length > 0;
    const stamp = (m: ServiceBusMessage): ServiceBusMessage => {
      if (traced) m.applicationProperties = { ...m.applicationProperties, ...trace };
      return m;
    };
    try {
      let sent: number;
      if (known.count === 1) {
        const [message] = messages as ServiceBusMessage[];
        await context.with(ctx, () => withResend(() => sender.sendMessages(stamp(message!))));
        sent = 1;
      } else {
        sent = await context.with(ctx, () =>
          sendInBatches(sender, mapEach(messages, stamp), {
            maxInFlight,
            onSent,
            send: (batch) => withResend(() => sender.sendMessages(batch)),
          }),
        );
        if (known.count === 0 && sent > 1) span.setAttribute(Attr.batchMessageCount, sent);
      }
      endSpan(span);
      return sent;
    } catch (error) {
      endSpan(span, error);
      throw error;
    }
  }

  return {
    queue: options.queue,
    async publish(type, key, body, extra = {}) {
      const message = toServiceBusMessage({ ...extra, type, key, body });
      await sendTraced([message], { count: 1, messageId: String(message.messageId) });
      return { messageId: String(message.messageId) };
    },
    async publishBatch(events) {
      // Every event is checked before the first is sent: a bad one fails the call with nothing published.
      const messages = events.map(toServiceBusMessage);
      const only = messages.length === 1 ? String(messages[0]!.messageId) : undefined;
      if (messages.length > 0) await sendTraced(messages, { count: messages.length, messageId: only });
      return messages.map((m) => ({ messageId: String(m.messageId) }));
    },
    publishAll(events, opts = {}) {
      return sendTraced(mapEach(events, toServiceBusMessage), { count: 0 }, opts.onSent);
    },
    async close() {
      await sender.close();
      if (ownsClient) await client.close();
    },
  };
}

export interface SendInBatchesOptions {
  /** Batches sent and not yet acknowledged, at most (default 1: strict order, even across a resend). */
  readonly maxInFlight?: number;
  /** Called after each acknowledged batch with its message count, in order. */
  readonly onSent?: (count: number) => void;
  /** Sends one batch (default `sender.sendMessages`); the publisher wraps it in its resend. */
  readonly send?: (batch: ServiceBusMessageBatch) => Promise<void>;
}

/**
 * Sends prepared messages in order, in batches filled to the size limit the link advertises. While a batch is in
 * flight the next one is filled, so encoding overlaps the round trip; a batch is sent only when fewer than
 * `maxInFlight` are unacknowledged. Memory holds at most `maxInFlight` + 1 batches, whatever the source's length.
 * A message too large for an empty batch is an error. Resolves with the number of messages sent.
 */
export async function sendInBatches(
  sender: Pick<ServiceBusSender, "createMessageBatch" | "sendMessages">,
  messages: Iterable<ServiceBusMessage> | AsyncIterable<ServiceBusMessage>,
  options: SendInBatchesOptions = {},
): Promise<number> {
  const maxInFlight = options.maxInFlight ?? 1;
  const send = options.send ?? ((batch: ServiceBusMessageBatch) => sender.sendMessages(batch));
  const inFlight: Promise<number>[] = [];
  let sent = 0;
  const settle = async (keep: number): Promise<void> => {
    while (inFlight.length > keep) {
      const count = await inFlight.shift()!;
      sent += count;
      options.onSent?.(count);
    }
  };
  const dispatch = async (batch: ServiceBusMessageBatch): Promise<void> => {
    await settle(maxInFlight - 1);
    const pending = send(batch).then(() => batch.count);
    // Awaited in order by `settle`; this only keeps a failure from counting as unhandled until then.
    pending.catch(() => {});
    inFlight.push(pending);
    // One turn of the event loop lets the SDK put the batch on the wire before the next is filled, so the
    // broker works on it while this process encodes.
    await new Promise<void>((resolve) => setImmediate(resolve));
  };
  let batch = await sender.createMessageBatch();
  const rollOver = async (message: ServiceBusMessage): Promise<void> => {
    if (batch.count === 0) throw tooLarge(message);
    await dispatch(batch);
    batch = await sender.createMessageBatch();
    if (!batch.tryAddMessage(message)) throw tooLarge(message);
  };
  try {
    // Two loops so a plain array costs no promise per message; only a full batch makes the loop wait.
    if (Symbol.asyncIterator in messages) {
      for await (const message of messages) {
        if (!batch.tryAddMessage(message)) await rollOver(message);
      }
    } else {
      for (const message of messages) {
        if (!batch.tryAddMessage(message)) await rollOver(message);
      }
    }
    if (batch.count > 0) await dispatch(batch);
    await settle(0);
  } catch (error) {
    // Whatever is already on its way is waited for, so `onSent` reports exactly what the broker acknowledged.
    await Promise.allSettled(inFlight);
    await settle(0).catch(() => {});
    throw error;
  }
  return sent;
}

function tooLarge(message: ServiceBusMessage): RangeError {
  return new RangeError(`message ${String(message.messageId)} is larger than a batch may be`);
}

/** A lazy map over a stream; a plain array stays synchronous (no promise per element). */
function mapEach<A, B>(
  items: Iterable<A> | AsyncIterable<A>,
  fn: (item: A) => B,
): Iterable<B> | AsyncIterable<B> {
  if (Symbol.asyncIterator in items) {
    return (async function* () {
      for await (const item of items) yield fn(item);
    })();
  }
  return (function* () {
    for (const item of items) yield fn(item);
  })();
}

function isTransient(error: unknown): boolean {
  if (isServiceBusError(error)) return error.retryable;
  const e = error as { retryable?: unknown; code?: unknown } | undefined;
  return (
    e?.retryable === true || ["ECONNRESET", "ECONNREFUSED", "ETIMEDOUT", "EPIPE"].includes(String(e?.code))
  );
}
