import assert from "node:assert/strict";
import { context, trace } from "@opentelemetry/api";
import { type Attributes } from "@opentelemetry/api";
import {
  ParentBasedSampler,
  SamplingDecision,
  TraceIdRatioBasedSampler,
  type Sampler,
} from "@opentelemetry/sdk-trace";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import {
  endProcessSpan,
  injectTraceContext,
  startProcessSpan,
  traceSettlement,
} from "../../src/servicebus/tracing.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { workerMetrics } from "../../src/telemetry/metrics.ts";
import { Attr, Metric, TRACER_NAME } from "../../src/telemetry/names.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { installTelemetryCapture, metricTotal, type TelemetryCapture } from "../helpers/telemetry.ts";

const consumer = "credit";

/**
 * What docs/telemetry.md ("Sampling") says a sampled-out message still records, on the real SDK with the sampler
 * OTEL_TRACES_SAMPLER=parentbased_traceidratio builds, and the real inbox on PostgreSQL: with a ratio of 0 none of
 * its spans, but every metric and log lines that carry its trace id; with a ratio of 1 every span and attribute.
 */
describe("telemetry: a sampled-out message", function () {
  this.timeout(60_000);
  let url: string;
  let store: InboxStore | undefined;
  let capture: TelemetryCapture | undefined;

  before(async () => {
    url = await createTestDatabase("telemetry_sampling");
  });
  afterEach(async () => {
    await store?.close();
    store = undefined;
    await capture?.stop();
    capture = undefined;
  });

  /** The names of the spans the SDK was asked to start, in order: a sampler sees every one, recorded or not. */
  let asked: string[] = [];
  function counting(inner: Sampler): Sampler {
    return {
      shouldSample: (ctx, traceId, name, kind, attributes, links) => {
        asked.push(name);
        return inner.shouldSample(ctx, traceId, name, kind, attributes, links);
      },
      toString: () => `counting ${inner.toString()}`,
    };
  }

  /**
   * One message's process span, its inbox transaction, a log line inside, its settlement span and its metrics, as
   * the worker does. `inside` runs in the handler, in the message's context.
   */
  async function processOne(
    ratio: number | Sampler,
    messageId: string,
    options: { applicationProperties?: Record<string, unknown>; inside?: () => void } = {},
  ): Promise<{ lines: string[] }> {
    asked = [];
    capture = installTelemetryCapture({
      sampler: counting(
        typeof ratio === "number"
          ? new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) })
          : ratio,
      ),
    });
    store = createPostgresInboxStore({ url, maxConnections: 2 });
    await store.migrate();
    asked = [];
    const lines: string[] = [];
    const logger = createLogger({ write: (line) => lines.push(line) });
    const { span, ctx } = startProcessSpan({
      queue: "orders",
      messageId,
      deliveryCount: 0,
      correlationId: "c-1",
      applicationProperties: options.applicationProperties ?? {},
    });
    const outcome = await context.with(ctx, () =>
      store!.process({ messageId, consumer }, async (tx) => {
        logger.info("inside the handler", { messageId });
        options.inside?.();
        await tx.query("SELECT 1");
      }),
    );
    assert.equal(outcome.kind, "committed");
    await traceSettlement("complete", "orders", ctx, () => Promise.resolve());
    workerMetrics().recordProcessed({ queue: "orders", outcome: "committed", durationMs: 3 });
    workerMetrics().recordSettlement({ queue: "orders", disposition: "complete" });
    endProcessSpan(span, { outcome: "committed", disposition: "complete", messageType: "OrderPlaced" });
    return { lines };
  }

  /** Every span a message processed alone has, recorded: what a sampled message must keep. */
  const EVERY_SPAN = ["BEGIN", "INSERT Inbox", "SELECT", "COMMIT", "inbox.transaction", "complete orders"];
  const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
  const PRODUCER_SPAN = "00f067aa0ba902b7";

  it("at ratio 0: no span, but every metric, and log lines with the trace and span ids", async () => {
    const { lines } = await processOne(0, "m-sampled-out");
    assert.deepEqual(
      capture!.spans().map((s) => s.name),
      [],
    );
    const data = await capture!.collect();
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "committed" }), 1);
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "complete" }), 1);
    const line = JSON.parse(lines.find((l) => l.includes("inside the handler"))!) as Record<string, unknown>;
    assert.match(String(line.trace_id), /^[0-9a-f]{32}$/);
    assert.match(String(line.span_id), /^[0-9a-f]{16}$/);
    assert.equal(trace.getActiveSpan(), undefined);
  });

  it("at ratio 0, the SDK is asked for the process span alone: no inbox, statement or settlement span is started", async () => {
    await processOne(0, "m-none-started");
    assert.deepEqual(asked, ["process orders"]);
    assert.deepEqual(
      capture!.spans().map((s) => s.name),
      [],
    );
    const data = await capture!.collect();
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "committed" }), 1);
  });

  it("at ratio 0 with a producer that sampled its trace: every span is recorded, in the producer's trace", async () => {
    await processOne(0, "m-parent-sampled", {
      applicationProperties: { traceparent: `00-${TRACE}-${PRODUCER_SPAN}-01` },
    });
    const spans = capture!.spans();
    for (const name of EVERY_SPAN)
      assert.ok(
        spans.some((s) => s.name === name),
        `${name} in ${spans.map((s) => s.name).join(", ")}`,
      );
    assert.ok(spans.every((s) => s.spanContext().traceId === TRACE));
    const process = spans.find((s) => s.name === "process orders");
    assert.equal(process?.parentSpanContext?.spanId, PRODUCER_SPAN);
    const tx = spans.find((s) => s.name === "inbox.transaction");
    assert.equal(tx?.parentSpanContext?.spanId, process?.spanContext().spanId);
    assert.equal(tx?.attributes[Attr.messageId], "m-parent-sampled");
    const settle = spans.find((s) => s.name === "complete orders");
    assert.equal(settle?.parentSpanContext?.spanId, process?.spanContext().spanId);
  });

  it("with a producer that sampled its trace out: none started, and the handler still sees and sends the trace", async () => {
    let handlerParent: string | undefined;
    const sent: Record<string, unknown> = {};
    await processOne(1, "m-parent-sampled-out", {
      applicationProperties: { "Diagnostic-Id": `00-${TRACE}-${PRODUCER_SPAN}-00` },
      inside: () => {
        // A handler's own span and a message it sends: children of the message's process span, in its trace.
        const own = trace.getTracer(TRACER_NAME).startSpan("handler's own");
        handlerParent = trace.getActiveSpan()?.spanContext().traceId;
        injectTraceContext(trace.setSpan(context.active(), own), sent);
        own.end();
      },
    });
    assert.deepEqual(asked, ["process orders", "handler's own"]);
    assert.deepEqual(
      capture!.spans().map((s) => s.name),
      [],
    );
    assert.equal(handlerParent, TRACE);
    assert.match(String(sent.traceparent), new RegExp(`^00-${TRACE}-[0-9a-f]{16}-00$`));
    assert.equal(sent["Diagnostic-Id"], sent.traceparent);
    const data = await capture!.collect();
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "complete" }), 1);
  });

  it("at ratio 1: the process span with its attributes, the transaction and its statements under it", async () => {
    await processOne(1, "m-sampled-in");
    const spans = capture!.spans();
    const process = spans.find((s) => s.name === "process orders");
    assert.ok(process, spans.map((s) => s.name).join(", "));
    assert.equal(process.attributes[Attr.messageId], "m-sampled-in");
    assert.equal(process.attributes[Attr.deliveryCount], 1);
    assert.equal(process.attributes[Attr.conversationId], "c-1");
    assert.equal(process.attributes[Attr.destinationName], "orders");
    assert.equal(process.attributes[Attr.outcome], "committed");
    const tx = spans.find((s) => s.name === "inbox.transaction");
    assert.equal(tx?.attributes[Attr.messageId], "m-sampled-in");
    assert.equal(tx?.parentSpanContext?.spanId, process.spanContext().spanId);
    const select = spans.find((s) => s.attributes[Attr.dbQueryText] === "SELECT 1");
    assert.equal(select?.parentSpanContext?.spanId, tx?.spanContext().spanId);
    for (const name of EVERY_SPAN)
      assert.ok(
        spans.some((s) => s.name === name),
        name,
      );
  });

  it("a sampler sees the fixed attributes at span creation: entity, operation, system (the conventions ask it)", async () => {
    const seen = new Map<string, Attributes>();
    const sampler: Sampler = {
      shouldSample: (_ctx, _traceId, name, _kind, attributes) => {
        seen.set(name, { ...attributes });
        return { decision: SamplingDecision.RECORD_AND_SAMPLED };
      },
      toString: () => "recording what it is shown",
    };
    await processOne(sampler, "m-custom-sampler");
    assert.deepEqual(seen.get("process orders"), {
      [Attr.messagingSystem]: "servicebus",
      [Attr.operationName]: "process",
      [Attr.operationType]: "process",
      [Attr.destinationName]: "orders",
    });
    assert.deepEqual(seen.get("inbox.transaction"), { [Attr.dbSystem]: "postgresql" });
    // The per-message ones come after the decision, so the sampler was not shown them.
    assert.equal(seen.get("process orders")?.[Attr.messageId], undefined);
    const select = [...seen.entries()].find(([, attributes]) => attributes[Attr.dbQueryText] === "SELECT 1");
    assert.equal(select?.[1][Attr.dbSystem], "postgresql");
  });
});
