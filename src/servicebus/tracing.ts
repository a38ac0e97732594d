import {
  context,
  createTraceState,
  propagation,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type SpanContext,
} from "@opentelemetry/api";
import {
  Attr,
  errorType,
  MESSAGING_SYSTEM,
  SpanEvent,
  SpanName,
  TRACER_NAME,
  destinationAttributes,
  type Disposition,
  type Outcome,
} from "../telemetry/names.ts";
import { sampledOut } from "../telemetry/recording.ts";

export { errorType } from "../telemetry/names.ts";

/**
 * The project's Service Bus spans, kept small so the telemetry set-up can extend them. Without a registered SDK
 * every call here is a no-op.
 */
const tracer = () => trace.getTracer(TRACER_NAME);

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The producer's span context from `traceparent` or the SDK's `Diagnostic-Id` (same W3C format). */
export function producerContext(properties: Readonly<Record<string, unknown>>): SpanContext | undefined {
  for (const name of ["traceparent", "Diagnostic-Id"]) {
    const value = properties[name];
    if (typeof value !== "string") continue;
    const match = TRACEPARENT.exec(value.trim().toLowerCase());
    if (!match || match[1] === "ff") continue;
    const traceId = match[2]!;
    const spanId = match[3]!;
    if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) continue;
    const traceState = typeof properties.tracestate === "string" ? properties.tracestate : undefined;
    const spanContext: { -readonly [K in keyof SpanContext]: SpanContext[K] } = {
      traceId,
      spanId,
      traceFlags: parseInt(match[4]!, 16) & TraceFlags.SAMPLED,
      isRemote: true,
    };
    if (traceState !== undefined) spanContext.traceState = createTraceState(traceState);
    return spanContext;
  }
  return undefined;
}

export interface ProcessSpanInput {
  readonly queue: string;
  readonly messageId: string;
  readonly correlationId?: string;
  readonly deliveryCount: number;
  readonly sessionId?: string;
  readonly applicationProperties: Readonly<Record<string, unknown>>;
}

/**
 * The CONSUMER span of one message: a child of the producer's span, and linked to it as the messaging conventions
 * recommend. The parent puts the publish, every delivery of the message, its inbox transaction and its settlement
 * in one trace (docs/telemetry.md); a message without trace context starts a new trace.
 */
export function startProcessSpan(input: ProcessSpanInput): { span: Span; ctx: Context } {
  const producer = producerContext(input.applicationProperties);
  const parent = producer ? trace.setSpanContext(context.active(), producer) : context.active();
  // The attributes fixed by the entity go in at creation, where a sampler can read them (the semantic conventions
  // ask for them there); they are one frozen object per entity, so this builds nothing per message.
  const span = tracer().startSpan(
    processName(input.queue),
    {
      kind: SpanKind.CONSUMER,
      attributes: processAttributes(input.queue),
      links: producer ? [{ context: producer }] : [],
    },
    parent,
  );
  // The per-message attributes wait for the sampler's decision: a sampled-out message builds none of them
  // (docs/telemetry.md, "Sampling").
  if (span.isRecording()) {
    span.setAttribute(Attr.messageId, input.messageId);
    // The convention counts attempts, this one included (as the .NET SDK reports it); @azure/service-bus
    // passes on the AMQP header, which counts earlier attempts only (0 on the first delivery).
    span.setAttribute(Attr.deliveryCount, input.deliveryCount + 1);
    if (input.correlationId !== undefined) span.setAttribute(Attr.conversationId, input.correlationId);
    if (input.sessionId !== undefined) span.setAttribute(Attr.sessionId, input.sessionId);
  }
  return { span, ctx: trace.setSpan(parent, span) };
}

/** The process span's name and its attributes that depend on its entity alone, built once per entity. */
const processName = perKey((queue) => SpanName.process(queue));
const processAttributes = perKey((queue): Attributes =>
  Object.freeze({
    [Attr.messagingSystem]: MESSAGING_SYSTEM,
    [Attr.operationName]: "process",
    [Attr.operationType]: "process",
    ...destinationAttributes(queue),
  }),
);

/** A settlement span's name and attributes, built once per disposition and entity. */
type SpanShape = { readonly name: string; readonly attributes: Attributes };
const settleShape =
  (disposition: Disposition) =>
  (queue: string): SpanShape => ({
    name: SpanName.settle(disposition, queue),
    attributes: Object.freeze({
      [Attr.messagingSystem]: MESSAGING_SYSTEM,
      [Attr.operationName]: disposition,
      [Attr.operationType]: "settle",
      ...destinationAttributes(queue),
      [Attr.dispositionStatus]: disposition,
    }),
  });
const settleSpans: Record<Disposition, (queue: string) => SpanShape> = {
  complete: perKey(settleShape("complete")),
  abandon: perKey(settleShape("abandon")),
  dead_letter: perKey(settleShape("dead_letter")),
};

/** `build(key)` kept per key (an entity path), for what every message's spans would otherwise build anew. */
function perKey<T>(build: (key: string) => T): (key: string) => T {
  const built = new Map<string, T>();
  return (key) => {
    let value = built.get(key);
    if (value === undefined) {
      value = build(key);
      if (built.size < 64) built.set(key, value);
    }
    return value;
  };
}

/** The attempt now running, on the message's process span (set again by each retry in place). */
export function recordAttempt(ctx: Context, attempt: number): void {
  const span = trace.getSpan(ctx);
  if (span?.isRecording()) span.setAttribute(Attr.attempt, attempt);
}

/** A span event on the process span: the worker waits `delayMs` under the lock before the attempt named. */
export function recordRetryWait(ctx: Context, attempt: number, delayMs: number, error: unknown): void {
  const span = trace.getSpan(ctx);
  if (!span?.isRecording()) return;
  span.addEvent(SpanEvent.retryWaited, {
    [Attr.attempt]: attempt,
    [Attr.retryDelay]: delayMs,
    [Attr.errorType]: errorType(error),
  });
}

/**
 * The PRODUCER span of a scheduled retry, a child of the process span, with an event on the process span: the
 * copy's MessageId, its attempt and when it is due. None for a sampled-out message.
 */
export async function traceRetryScheduled<T>(
  queue: string,
  parent: Context,
  copy: { messageId: string; attempt: number; enqueueAt: Date },
  fn: () => Promise<T>,
): Promise<T> {
  if (sampledOut(parent)) return await fn();
  const delayMs = Math.max(0, copy.enqueueAt.getTime() - Date.now());
  trace.getSpan(parent)?.addEvent(SpanEvent.retryScheduled, {
    [Attr.attempt]: copy.attempt,
    [Attr.retryDelay]: delayMs,
    [Attr.messageId]: copy.messageId,
  });
  const span = tracer().startSpan(
    SpanName.scheduleRetry(queue),
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        [Attr.messagingSystem]: MESSAGING_SYSTEM,
        [Attr.operationName]: "schedule",
        [Attr.operationType]: "send",
        ...destinationAttributes(queue),
        [Attr.messageId]: copy.messageId,
        [Attr.attempt]: copy.attempt,
        [Attr.retryDelay]: delayMs,
      },
    },
    parent,
  );
  return await endedAfter(span, fn);
}

/** Records what became of the message on its process span and ends it. */
export function endProcessSpan(
  span: Span,
  result: {
    outcome: Outcome;
    disposition?: Disposition;
    errorType?: string;
    messageType?: string;
    reason?: string;
  },
): void {
  if (!span.isRecording()) {
    span.end();
    return;
  }
  span.setAttribute(Attr.outcome, result.outcome);
  if (result.disposition !== undefined) span.setAttribute(Attr.dispositionStatus, result.disposition);
  if (result.messageType !== undefined) span.setAttribute(Attr.messageType, result.messageType);
  if (result.reason !== undefined) span.setAttribute(Attr.deadLetterReason, result.reason);
  if (result.errorType !== undefined) {
    span.setAttribute(Attr.errorType, result.errorType);
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
}

/**
 * A child span around one settlement call (`complete <queue>`, `abandon <queue>`, `dead_letter <queue>`); none
 * for a sampled-out message.
 */
export async function traceSettlement<T>(
  disposition: Disposition,
  queue: string,
  parent: Context,
  fn: () => Promise<T>,
): Promise<T> {
  if (sampledOut(parent)) return await fn();
  const { name, attributes } = settleSpans[disposition](queue);
  const span = tracer().startSpan(name, { kind: SpanKind.CLIENT, attributes }, parent);
  return await endedAfter(span, fn);
}

/** The PRODUCER span of one send; `inject` writes its context into a message's application properties. */
export function startSendSpan(
  queue: string,
  messageCount: number,
  messageId?: string,
  parent: Context = context.active(),
  links: Link[] = [],
): { span: Span; ctx: Context } {
  const span = tracer().startSpan(
    SpanName.send(queue),
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        [Attr.messagingSystem]: MESSAGING_SYSTEM,
        [Attr.operationName]: "send",
        [Attr.operationType]: "send",
        ...destinationAttributes(queue),
        ...(messageCount > 1 ? { [Attr.batchMessageCount]: messageCount } : {}),
        ...(messageId !== undefined ? { [Attr.messageId]: messageId } : {}),
      },
      links,
    },
    parent,
  );
  return { span, ctx: trace.setSpan(parent, span) };
}

/**
 * The PRODUCER span of an outbox enqueue (operation `create`): a child of the caller's active span, inside its
 * transaction. Its context is stored with the row and continued by the relay's send span (docs/outbox.md).
 */
export function startCreateSpan(messageCount: number, messageId?: string): { span: Span; ctx: Context } {
  const span = tracer().startSpan(SpanName.create, {
    kind: SpanKind.PRODUCER,
    attributes: {
      [Attr.messagingSystem]: MESSAGING_SYSTEM,
      [Attr.operationName]: "create",
      [Attr.operationType]: "create",
      ...(messageCount > 1 ? { [Attr.batchMessageCount]: messageCount } : {}),
      ...(messageId !== undefined ? { [Attr.messageId]: messageId } : {}),
    },
  });
  return { span, ctx: trace.setSpan(context.active(), span) };
}

/** A `traceparent` value for a context, or undefined when it carries no valid span. */
export function traceparentOf(ctx: Context): string | undefined {
  const spanContext = trace.getSpanContext(ctx);
  if (!spanContext || !trace.isSpanContextValid(spanContext)) return undefined;
  const flags = (spanContext.traceFlags & TraceFlags.SAMPLED).toString(16).padStart(2, "0");
  return `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
}

/** The W3C tracestate of the context's span, or undefined when it has none (vendors' entries, up to 512 chars). */
export function tracestateOf(ctx: Context): string | undefined {
  const spanContext = trace.getSpanContext(ctx);
  if (!spanContext || !trace.isSpanContextValid(spanContext)) return undefined;
  const serialized = spanContext.traceState?.serialize();
  return serialized && serialized.length <= 512 ? serialized : undefined;
}

/** Writes `traceparent` and `Diagnostic-Id` (and whatever the registered propagator adds) for the consumer. */
export function injectTraceContext(ctx: Context, properties: Record<string, unknown>): void {
  const spanContext = trace.getSpanContext(ctx);
  if (!spanContext || !trace.isSpanContextValid(spanContext)) return;
  propagation.inject(ctx, properties, { set: (carrier, key, value) => (carrier[key] = value) });
  const flags = (spanContext.traceFlags & TraceFlags.SAMPLED).toString(16).padStart(2, "0");
  const traceparent = `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
  properties.traceparent = traceparent;
  properties["Diagnostic-Id"] = traceparent;
}

export function endSpan(span: Span, error?: unknown): void {
  if (error !== undefined) {
    span.setAttribute(Attr.errorType, errorType(error));
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
}

/** Runs `fn` inside `span`: a failure is recorded on it, and it ends either way. */
async function endedAfter<T>(span: Span, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    span.setAttribute(Attr.errorType, errorType(error));
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw error;
  } finally {
    span.end();
  }
}
