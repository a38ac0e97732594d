import assert from "node:assert/strict";
import { SpanKind } from "@opentelemetry/api";
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { useLocalBroker } from "../helpers/broker.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";

const QUEUE = "sbinbox";

describe("publisher (real SDK, local broker)", function () {
  const fixture = useLocalBroker();
  const telemetry = useTelemetryCapture();

  async function receiveAll(n: number): Promise<ServiceBusReceivedMessage[]> {
    const receiver = fixture.client.createReceiver(QUEUE, {
      receiveMode: "receiveAndDelete",
      skipParsingBodyAsJson: true,
    });
    const got: ServiceBusReceivedMessage[] = [];
    try {
      const deadline = Date.now() + 10_000;
      while (got.length < n && Date.now() < deadline) {
        got.push(...(await receiver.receiveMessages(n - got.length, { maxWaitTimeInMs: 500 })));
      }
      // Nothing more than expected.
      got.push(...(await receiver.receiveMessages(10, { maxWaitTimeInMs: 200 })));
    } finally {
      await receiver.close();
    }
    return got;
  }

  it("sends the derived MessageId, the type as subject, JSON bytes, and the trace context", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    const { messageId } = await publisher.publish("AccountCredited", "42", { accountId: "a", amount: 1 });
    await publisher.close();
    assert.equal(messageId, "a2668bf9-a521-5762-bb23-32b8fb55257a");
    const [m, ...rest] = await receiveAll(1);
    assert.equal(rest.length, 0);
    assert.equal(m?.messageId, messageId);
    assert.equal(m?.subject, "AccountCredited");
    assert.equal(m?.contentType, "application/json");
    assert.deepEqual(JSON.parse(Buffer.from(m?.body as Uint8Array).toString("utf8")), {
      accountId: "a",
      amount: 1,
    });
    const [send] = telemetry().spansNamed(`send ${QUEUE}`);
    assert.ok(send, "a send span");
    assert.equal(send.kind, SpanKind.PRODUCER);
    const traceparent = `00-${send.spanContext().traceId}-${send.spanContext().spanId}-01`;
    assert.equal(m?.applicationProperties?.traceparent, traceparent);
    assert.equal(m?.applicationProperties?.["Diagnostic-Id"], traceparent);
  });

  it("publishes a batch larger than one AMQP batch, in order; a republished batch is dropped by the broker", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    const events = Array.from({ length: 300 }, (_, i) => ({
      type: "AccountCredited",
      key: `batch-${i}`,
      body: { accountId: `a${i}`, amount: 1, reference: "x".repeat(2_000) },
    }));
    const results = await publisher.publishBatch(events);
    const dropped = fixture.broker.counts(QUEUE).duplicatesDropped;
    await publisher.publishBatch(events);
    await publisher.close();
    assert.deepEqual(
      results.map((r) => r.messageId),
      events.map((e) => deriveMessageId(e.type, e.key)),
    );
    assert.equal(fixture.broker.counts(QUEUE).duplicatesDropped, dropped + 300);
    const got = await receiveAll(300);
    assert.equal(got.length, 300);
    assert.deepEqual(
      got.map((m) => m.messageId),
      results.map((r) => r.messageId),
    );
  });
});
