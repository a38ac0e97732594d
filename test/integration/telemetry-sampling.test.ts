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
import { endProcessSpan, startProcessSpan } from "../../src/servicebus/tracing.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { workerMetrics } from "../../src/telemetry/metrics.ts";
import { Attr, Metric } from "../../src/telemetry/names.ts";
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

  /** One message's process span, its inbox transaction, a log line inside and its metrics, as the worker does. */
  async function processOne(ratio: number | Sampler, messageId: string): Promise<{ lines: string[] }> {
    capture = installTelemetryCapture({
      sampler:
        typeof ratio === "number"
          ? new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) })
          : ratio,
    });
    store = createPostgresInboxStore({ url, maxConnections: 2 });
    await store.migrate();
    const lines: string[] = [];
    const logger = createLogger({ write: (line) => lines.push(line) });
    const { span, ctx } = startProcessSpan({
      queue: "orders",
      messageId,
      deliveryCount: 0,
      correlationId: "c-1",
      applicationProperties: {},
    });
    const outcome = await context.with(ctx, () =>
      store!.process({ messageId, consumer }, async (tx) => {
        logger.info("inside the handler", { messageId });
        await tx.query("SELECT 1");
      }),
    );
    assert.equal(outcome.kind, "committed");
    workerMetrics().recordProcessed({ queue: "orders", outcome: "committed", durationMs: 3 });
    workerMetrics().recordSettlement({ queue: "orders", disposition: "complete" });
    endProcessSpan(span, { outcome: "committed", disposition: "complete", messageType: "OrderPlaced" });
    return { lines };
  }

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
