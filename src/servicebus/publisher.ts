import {
  isServiceBusError,
  type ServiceBusClient,
  type ServiceBusMessage,
  type ServiceBusMessageBatch,
  type ServiceBusSender,
} from "@azure/service-bus";
import type * as OtelApi from "@opentelemetry/api";
import { Attr } from "../telemetry/names.ts";
import type * as SpanHelpers from "./tracing.ts";
import { deriveMessageId } from "./message-id.ts";
import { createServiceBusClient, type ServiceBusTarget } from "./client.ts";
import { sendUnlessDropped } from "./connection-drop.ts";
import { isThrottled, OWN_RETRY, throttledWaitMs } from "./throttling.ts";
import { same, sendBuilt, tooLarge, type PublishFailure } from "./send-in-batches.ts";

export { sendInBatches, type PublishFailure, type SendInBatchesOptions } from "./send-in-batches.ts";

/**
 * Where @opentelemetry/api (major version 1) keeps what an OpenTelemetry SDK registers (tracer provider,
 * propagator, context manager): `Symbol.for("opentelemetry.js.api.1")` on globalThis, set by the first
 * registration. Without it every span is a no-op and no trace context exists, so the API and the span helpers are
 * not loaded at all: about 30 ms of a short-lived publisher's start-up. Looked at on every call, so an SDK
 * registered after this module loaded is still used.
 */
const OTEL_API_GLOBAL = Symbol.for("opentelemetry.js.api.1");
type Tracing = [typeof OtelApi, typeof SpanHelpers];
let tracing: Promise<Tracing> | undefined;
function tracingIfRegistered(): Promise<Tracing> | undefined {
  if (tracing === undefined && (globalThis as Record<symbol, unknown>)[OTEL_API_GLOBAL] === undefined) {
    return undefined;
  }
  return (tracing ??= Promise.all([import("@opentelemetry/api"), import("./tracing.ts")]));
}

/**
 * Counts a throttled send in `sbinbox.servicebus.throttled`, loading the metric's module (and so the OpenTelemetry
 * API) only when an SDK is registered: without one the count would go nowhere.
 */
function countThrottledSend(queue: string): void {
  if ((globalThis as Record<symbol, unknown>)[OTEL_API_GLOBAL] === undefined) return;
  void import("../telemetry/throttle-metrics.ts").then(({ recordThrottled }) =>
    recordThrottled("send", queue),
  );
}

/** One event: its type (the message's subject), its business key, and a JSON-serialisable body. */
export interface PublishEvent {
  readonly type: string;
  readonly key: string;
  readonly body: unknown;
  /** Extra application properties; `traceparent` and `Diagnostic-Id` are set by the publisher. */
  readonly properties?: Readonly<Record<string, string | number | boolean>>;
  readonly correlationId?: string;
  /**
   * The session key (e.g. the aggregate's id) on a session-enabled entity: set as `sessionId` and as the partition
   * key, which Service Bus requires to match it. Events of one key are then received in the order they were sent.
   */
  readonly sessionId?: string;
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
  /**
   * A check that an event's message fits in an empty batch of this queue (the link's size limit), without sending
   * it: throws a `RangeError` naming `where` if not. Most events are judged by a bound on their size (the body's
   * length, and 3 bytes a UTF-16 unit of every string, twice: see `sizeBound`); only one whose bound passes the
   * limit is encoded, by the SDK, into an empty batch, and returns a promise.
   */
  sizeCheck(): Promise<(event: PublishEvent, where: string) => Promise<void> | undefined>;
  close(): Promise<void>;
}

export interface PublisherOptions {
  /** The queue, or the topic, to send to: a topic copies each event to every subscription its rules admit. */
  readonly queue: string;
  /**
   * An existing client (not closed by the publisher; its retry policy applies inside each try, each try bounded by
   * the duplicate window), or where to connect (closed by `close`; one SDK try per send, OWN_RETRY: the publisher
   * does the retrying).
   */
  readonly client?: ServiceBusClient;
  readonly connection?: ServiceBusTarget;
  /**
   * Resends after the SDK's own retries give up on a transient error, `resendDelayMs` doubling. Safe: the MessageId
   * is derived from the event, so the broker's duplicate detection drops any copy that did arrive. Default 3. A
   * ServerBusy answer is not counted against them: it is tried again 1-3 s later (Service Bus's 2 s, jittered)
   * for as long as the duplicate window allows.
   */
  readonly resendAttempts?: number;
  readonly resendDelayMs?: number;
  /**
   * The queue's (or topic's) DuplicateDetectionHistoryTimeWindow. No resend starts later than this, less a minute,
   * after a message's first try: past it a resend of a try whose answer was lost is no longer dropped. The send
   * then fails with `ResendWindowError` instead. Default 10 minutes, Service Bus's default and sbinbox's Bicep's.
   */
  readonly duplicateWindowMs?: number;
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
  const message: ServiceBusMessage = {
    messageId: deriveMessageId(event.type, event.key),
    subject: event.type,
    contentType: "application/json",
    // Bytes (an AMQP data section), as the .NET and Python clients send them, so every consumer reads the same.
    body: Buffer.from(json, "utf8"),
  };
  // Set only when given (assigned, not spread from a temporary object per message): absent rather than empty, since
  // the SDK encodes even an empty map, per message.
  if (event.correlationId !== undefined) message.correlationId = event.correlationId;
  if (event.sessionId !== undefined) {
    if (typeof event.sessionId !== "string" || event.sessionId === "" || event.sessionId.length > 128)
      throw new TypeError(
        `the sessionId of ${event.type}:${event.key} must be a string of 1 to 128 characters (Service Bus's limit)`,
      );
    message.sessionId = event.sessionId;
    message.partitionKey = event.sessionId;
  }
  if (event.properties) message.applicationProperties = { ...event.properties };
  return message;
}

export function createPublisher(options: PublisherOptions): Publisher {
  if (!options.client && !options.connection)
    throw new TypeError("createPublisher needs a client or a connection");
  const maxInFlight = options.maxInFlight ?? 1;
  if (!Number.isInteger(maxInFlight) || maxInFlight < 1)
    throw new RangeError(`maxInFlight must be a positive whole number (got ${String(options.maxInFlight)})`);
  const ownsClient = !options.client;
  const client = options.client ?? createServiceBusClient(options.connection!, { retryOptions: OWN_RETRY });
  const sender: ServiceBusSender = client.createSender(options.queue);
  const attempts = options.resendAttempts ?? 3;
  const delayMs = options.resendDelayMs ?? 500;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));

  /** One send, failing at once (transient) if its connection drops: see `sendUnlessDropped`. */
  const sendOnce = (
    message: ServiceBusMessage | ServiceBusMessageBatch,
    signal: AbortSignal,
  ): Promise<void> => sendUnlessDropped(client, sender, message, signal);

  const windowMs = options.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS;

  /**
   * Each send() is itself up to maxRetries + 1 SDK tries, so its own retries are bounded too: every send gets a
   * signal that aborts it when the window's time (less the margin) is spent, and no SDK retry starts outside the
   * window. Throttled tries are counted (`sbinbox.servicebus.throttled`, operation send) and do not use up
   * `resendAttempts`: the window bounds them.
   */
  async function withResend(send: (signal: AbortSignal) => Promise<void>): Promise<void> {
    const firstTry = Date.now();
    const deadline = firstTry + windowMs - WINDOW_MARGIN_MS;
    let failures = 0;
    for (;;) {
      const signal = AbortSignal.timeout(Math.max(0, deadline - Date.now()));
      try {
        return await send(signal);
      } catch (error) {
        if (signal.aborted) throw new ResendWindowError(Date.now() - firstTry, windowMs, error);
        const throttled = isThrottled(error);
        if (throttled) countThrottledSend(options.queue);
        if (!throttled && (failures >= attempts || !isTransient(error))) throw error;
        const wait = throttled ? throttledWaitMs() : delayMs * 2 ** failures;
        if (!throttled) failures += 1;
        const resendAt = Date.now() + wait - firstTry;
        if (resendAt > windowMs - WINDOW_MARGIN_MS) throw new ResendWindowError(resendAt, windowMs, error);
        await sleep(wait);
      }
    }
  }

  /** Sends in order, one message alone or in batches filled to the size limit; resolves with the number sent. */
  async function send<T>(
    items: Iterable<T> | AsyncIterable<T>,
    build: (item: T) => ServiceBusMessage,
    known: { count: number },
    onSent?: (count: number) => void,
  ): Promise<number> {
    if (known.count === 1) {
      const message = build((items as T[])[0]!);
      await withResend((signal) => sendOnce(message, signal));
      return 1;
    }
    return sendBuilt(sender, items, build, {
      maxInFlight,
      onSent,
      send: (batch) => withResend((signal) => sendOnce(batch, signal)),
    });
  }

  /**
   * One PRODUCER span per call; its context goes into every message of the call. The trace properties are built
   * once and copied into each message, not injected through the propagator per message. With no OpenTelemetry SDK
   * registered there is no span and nothing to copy.
   */
  async function sendTraced<T>(
    items: Iterable<T> | AsyncIterable<T>,
    build: (item: T) => ServiceBusMessage,
    known: { count: number; messageId?: string },
    onSent?: (count: number) => void,
  ): Promise<number> {
    const otel = tracingIfRegistered();
    if (otel === undefined) return send(items, build, known, onSent);
    const [{ context }, { endSpan, injectTraceContext, startSendSpan }] = await otel;
    const { span, ctx } = startSendSpan(options.queue, known.count, known.messageId);
    const trace: Record<string, string> = {};
    injectTraceContext(ctx, trace);
    // Stamped as each message is built: no wrapper around the source, so nothing more per message than the copy.
    const stamped =
      Object.keys(trace).length > 0
        ? (item: T) => {
            const m = build(item);
            m.applicationProperties = { ...m.applicationProperties, ...trace };
            return m;
          }
        : build;
    try {
      const sent = await context.with(ctx, () => send(items, stamped, known, onSent));
      if (known.count === 0 && sent > 1) span.setAttribute(Attr.batchMessageCount, sent);
      endSpan(span);
      return sent;
    } catch (error) {
      endSpan(span, error);
      throw error;
    }
  }

  let maxSize: number | undefined;
  /** The size limit the link advertises, read once (the first read opens the link). */
  const sizeLimit = async (): Promise<number> =>
    (maxSize ??= (await sender.createMessageBatch()).maxSizeInBytes);
  /** The exact check of a message near the limit: the SDK encodes it into an empty batch of its own. */
  async function exactFit(message: ServiceBusMessage, where: string, limit: number): Promise<void> {
    const empty = await sender.createMessageBatch();
    // With trace properties as large as they will be when the message is sent: only when `sendTraced` will add
    // them, which is when an OpenTelemetry SDK is registered (the same test as there). Without one nothing is
    // added, and the placeholder would refuse messages of up to about 300 bytes below the limit that fit.
    const traced =
      tracingIfRegistered() === undefined
        ? message
        : { ...message, applicationProperties: { ...message.applicationProperties, ...TRACE_PLACEHOLDER } };
    if (!empty.tryAddMessage(traced)) throw tooLarge(message, where, limit);
  }
  /**
   * See `Publisher.sizeCheck`. The check returns a promise only for a message near the limit, which the SDK encodes
   * into an empty batch of its own.
   */
  async function messageSizeCheck(): Promise<
    (message: ServiceBusMessage, where: string) => Promise<void> | undefined
  > {
    const limit = await sizeLimit();
    return (message, where) => (sizeBound(message) <= limit ? undefined : exactFit(message, where, limit));
  }

  return {
    queue: options.queue,
    async publish(type, key, body, extra = {}) {
      const message = toServiceBusMessage({ ...extra, type, key, body });
      await sendTraced([message], same, { count: 1, messageId: String(message.messageId) });
      return { messageId: String(message.messageId) };
    },
    async publishBatch(events) {
      // Every event is checked before the first is sent, its size too: a bad one fails the call with nothing
      // published. One pass builds each message, its result and a bound on its size; only a call whose largest
      // bound passes the queue's limit looks again, to encode those near it exactly. (A second pass of awaited
      // checks, each with its description built, and the results mapped after: 1.6 µs a message in a profile.)
      const n = events.length;
      const messages = new Array<ServiceBusMessage>(n);
      const results = new Array<PublishResult>(n);
      let largest = 0;
      let i = 0;
      try {
        // The try is around the loop, not inside it, so the loop stays as lean as it was profiled.
        for (; i < n; i += 1) {
          const m = toServiceBusMessage(events[i]!);
          messages[i] = m;
          results[i] = { messageId: m.messageId as string };
          const bound = sizeBound(m);
          if (bound > largest) largest = bound;
        }
      } catch (error) {
        // The event's index, as the size check names it: the type and key alone may not say which line it was.
        throw nothingSent(
          error instanceof TypeError
            ? new TypeError(`event ${i}: ${error.message}`, { cause: error })
            : error,
        );
      }
      if (n > 0) {
        try {
          // One event too: sent alone, a message over the limit would be refused by the link with the SDK's own
          // error, not this one naming the event.
          const limit = await sizeLimit();
          if (largest > limit) {
            for (const [j, m] of messages.entries()) {
              if (sizeBound(m) > limit) await exactFit(m, `event ${j} (${String(m.messageId)})`, limit);
            }
          }
        } catch (error) {
          throw nothingSent(error);
        }
        try {
          await sendTraced(messages, same, {
            count: n,
            messageId: n === 1 ? results[0]!.messageId : undefined,
          });
        } catch (error) {
          // A single event is sent alone, not through `sendBuilt`, which counts the others: it was sent, so it
          // may be on the broker.
          if (n === 1 && error !== null && typeof error === "object" && !("acknowledged" in error)) {
            const failure: PublishFailure = { acknowledged: 0, acknowledgedPrefix: 0, unconfirmed: 1 };
            Object.assign(error, failure);
          }
          throw error;
        }
      }
      return results;
    },
    async sizeCheck() {
      const fits = await messageSizeCheck();
      return (event, where) => fits(toServiceBusMessage(event), where);
    },
    publishAll(events, opts = {}) {
      // Each event becomes its message as its batch takes it, inside the send loop (no generator wrapped around the
      // source: per message that was a second generator step, measurable against the plain SDK's loop).
      return sendTraced(events, toServiceBusMessage, { count: 0 }, opts.onSent);
    },
    async close() {
      await sender.close();
      if (ownsClient) await client.close();
    },
  };
}

/** A `publishBatch` that failed before sending anything: its error says so as a failed send's does. */
function nothingSent(error: unknown): unknown {
  if (error !== null && typeof error === "object") {
    const failure: PublishFailure = { acknowledged: 0, acknowledgedPrefix: 0, unconfirmed: 0 };
    Object.assign(error, failure);
  }
  return error;
}

/** The largest trace properties the publisher adds (W3C traceparent, and the same as Diagnostic-Id). */
const TRACE_PLACEHOLDER = {
  traceparent: `00-${"0".repeat(32)}-${"0".repeat(16)}-01`,
  "Diagnostic-Id": `00-${"0".repeat(32)}-${"0".repeat(16)}-01`,
} as const;

/**
 * A bound on a message's share of an empty batch, computed without encoding it: a message whose bound is within the
 * batch's limit certainly fits. The SDK counts the body, the message's properties and application properties, and
 * those of the first message once more as the batch's envelope; twice the UTF-8 length of every string and property
 * plus 4 KB of framing is above that for any message this publisher builds. A message over it is encoded for the
 * exact answer. A string's UTF-8 length is bounded by 3 bytes a UTF-16 unit rather than counted (no call into
 * `Buffer.byteLength` per string, no array of them per message): only a message within a few KB of the limit, or
 * with large non-ASCII properties, is encoded for nothing.
 */
function sizeBound(message: ServiceBusMessage): number {
  const body = message.body as Buffer;
  if (!Buffer.isBuffer(body)) return Infinity;
  let strings = utf8Bound(message.messageId) + utf8Bound(message.subject) + utf8Bound(message.contentType);
  strings += utf8Bound(message.correlationId) + 2 * utf8Bound(message.sessionId);
  const properties = message.applicationProperties;
  if (properties !== undefined) {
    for (const k in properties) {
      // 16 bytes a property: above AMQP's constructor and length bytes for a key and any scalar value.
      strings += 3 * k.length + utf8Bound(properties[k]) + 16;
    }
  }
  return body.length + 2 * strings + 4096;
}

/** At least the UTF-8 length of a property's value as text: UTF-8 takes at most 3 bytes a UTF-16 unit. */
function utf8Bound(value: string | number | boolean | Date | Buffer | null | undefined): number {
  if (value === undefined || value === null) return 0;
  if (typeof value === "string") return 3 * value.length;
  if (Buffer.isBuffer(value)) return value.length;
  return 3 * String(value).length;
}

const DEFAULT_DUPLICATE_WINDOW_MS = 10 * 60_000;
/** Kept back from the window for clock and send delays, as the outbox relay's `windowMarginMs`. */
const WINDOW_MARGIN_MS = 60_000;

/**
 * A send given up on because a resend would come too late for duplicate detection: an earlier try may have
 * arrived (its answer lost), and a copy sent now would not be dropped. Whether it arrived needs a look at the
 * queue (peek) or the consumer's inbox; the event is not lost if it did.
 */
export class ResendWindowError extends Error {
  override readonly name = "ResendWindowError";
  override readonly cause: unknown;
  constructor(sinceFirstTryMs: number, windowMs: number, cause: unknown) {
    super(
      `not resent: a resend ${sinceFirstTryMs} ms after the first try would fall outside the duplicate detection window (${windowMs} ms less a ${WINDOW_MARGIN_MS} ms margin), where a copy of a try that did arrive is no longer dropped; last error: ${(cause as Error | undefined)?.message ?? String(cause)}`,
    );
    this.cause = cause;
  }
}

/**
 * Whether a resend may succeed. A connection that cannot be opened reaches us from the SDK as Node's
 * AggregateError (one ECONNREFUSED per address tried, message "" and no code): transient when every inner error
 * is.
 */
export function isTransient(error: unknown): boolean {
  if (isServiceBusError(error)) return error.retryable;
  if (error instanceof AggregateError) return error.errors.length > 0 && error.errors.every(isTransient);
  const e = error as { retryable?: unknown; code?: unknown } | undefined;
  return (
    e?.retryable === true || ["ECONNRESET", "ECONNREFUSED", "ETIMEDOUT", "EPIPE"].includes(String(e?.code))
  );
}
