import assert from "node:assert/strict";
import { trace } from "@opentelemetry/api";
import {
  endSpan,
  injectTraceContext,
  producerContext,
  startProcessSpan,
  startSendSpan,
} from "../../src/servicebus/tracing.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";

describe("telemetry: trace context carried in the message", () => {
  const telemetry = useTelemetryCapture();

  it("the send span's context goes out as traceparent and Diagnostic-Id, the same W3C value", () => {
    const { span, ctx } = startSendSpan("orders", 1, "m-1");
    const properties: Record<string, unknown> = { tenant: "t-1" };
    injectTraceContext(ctx, properties);
    endSpan(span);
    const sent = telemetry().spansNamed("send orders")[0];
    assert.ok(sent);
    const expected = `00-${sent.spanContext().traceId}-${sent.spanContext().spanId}-01`;
    assert.equal(properties.traceparent, expected);
    assert.equal(properties["Diagnostic-Id"], expected);
    assert.equal(properties.tenant, "t-1");
  });

  it("a consumer takes the producer's context from Diagnostic-Id alone (as older Azure SDKs send it)", () => {
    const traceId = "0af7651916cd43dd8448eb211c80319c";
    const spanId = "b7ad6b7169203331";
    const context = producerContext({ "Diagnostic-Id": `00-${traceId}-${spanId}-01` });
    assert.deepEqual(
      context && { traceId: context.traceId, spanId: context.spanId, remote: context.isRemote },
      { traceId, spanId, remote: true },
    );
    const { span } = startProcessSpan({
      queue: "orders",
      messageId: "m-1",
      deliveryCount: 0,
      applicationProperties: { "Diagnostic-Id": `00-${traceId}-${spanId}-01` },
    });
    span.end();
    const process = telemetry().spansNamed("process orders")[0];
    assert.equal(process?.spanContext().traceId, traceId);
    assert.equal(process?.parentSpanContext?.spanId, spanId);
  });

  it("ignores what is not a valid traceparent, and then starts a new trace", () => {
    for (const value of ["", "garbage", "00-00000000000000000000000000000000-b7ad6b7169203331-01", 42]) {
      assert.equal(producerContext({ traceparent: value }), undefined, String(value));
    }
    const { span } = startProcessSpan({
      queue: "orders",
      messageId: "m-2",
      deliveryCount: 0,
      applicationProperties: {},
    });
    span.end();
    const process = telemetry().spansNamed("process orders")[0];
    assert.ok(process);
    assert.equal(process.parentSpanContext, undefined);
    assert.deepEqual(process.links, []);
    assert.ok(trace.isSpanContextValid(process.spanContext()));
  });
});
