import assert from "node:assert/strict";
import { ParentBasedSampler, TraceIdRatioBasedSampler, type Sampler } from "@opentelemetry/sdk-trace";
import { openDatabase, type Database } from "../../src/app/database.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { Attr, Metric, SpanName } from "../../src/telemetry/names.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import {
  installTelemetryCapture,
  metricTotal,
  useTelemetryCapture,
  type TelemetryCapture,
} from "../helpers/telemetry.ts";
import { countCredits, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";

describe("group commit telemetry: one inbox.batch span, linked both ways, and the batch-size metric", function () {
  const fixture = useLocalBroker();
  const telemetry = useTelemetryCapture();
  let db: Database & { url: string };
  before(async () => {
    db = await exampleDatabase("telemetry_batch");
  });
  after(async () => {
    await db.close();
  });

  it("each message keeps its process span; the batch's transaction is one span they link to", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    for (let i = 0; i < 8; i += 1)
      await publisher.publish("AccountCredited", `batch-traced-${i}`, { accountId: "a", amount: 1 });
    await publisher.close();
    const worker = startTestWorker({ client: fixture.client, db, batchSize: 4, batchWaitMs: 100 });
    try {
      await waitUntil(() => worker.stats.settled === 8, "all are settled");
    } finally {
      await worker.stop();
    }
    const processes = telemetry().spansNamed(`process ${QUEUE}`);
    const batches = telemetry().spansNamed(SpanName.inboxBatch);
    assert.equal(processes.length, 8, "one process span per message");
    assert.ok(batches.length >= 1, "at least one batch ran");
    const sizes = batches.map((b) => Number(b.attributes[Attr.batchMessageCount]));
    assert.ok(
      sizes.every((n) => n >= 2 && n <= 4),
      `batch sizes ${sizes.join(",")}`,
    );
    const batchIds = new Set(batches.map((b) => b.spanContext().spanId));
    const processIds = new Set(processes.map((p) => p.spanContext().spanId));
    let batched = 0;
    for (const p of processes) {
      const toBatch = p.links.filter((l) => batchIds.has(l.context.spanId));
      assert.ok(toBatch.length <= 1, "a process span links to at most one batch");
      batched += toBatch.length;
    }
    assert.equal(
      batched,
      sizes.reduce((a, b) => a + b, 0),
      "every batched message's process span links to its batch",
    );
    for (const b of batches) {
      assert.equal(b.parentSpanContext, undefined, "the batch span is a root: it belongs to no one message");
      assert.equal(b.links.length, Number(b.attributes[Attr.batchMessageCount]));
      assert.ok(
        b.links.every((l) => processIds.has(l.context.spanId)),
        "it links to its messages' spans",
      );
      assert.equal(b.attributes[Attr.batchCommitted], b.links.length);
    }
    // The batch's statements are its children: its marker insert among them.
    const batchChildren = telemetry()
      .spans()
      .filter((s) => s.parentSpanContext && batchIds.has(s.parentSpanContext.spanId));
    assert.ok(
      batchChildren.some((s) => s.name === "INSERT Inbox"),
      "the multi-row marker insert is under the batch",
    );
    const data = await telemetry().collect();
    assert.equal(metricTotal(data, Metric.batchSize), batches.length, "one batch-size point per batch");
    assert.equal(metricTotal(data, Metric.batchSize, { [Attr.batchOutcome]: true }), batches.length);
    assert.equal(
      metricTotal(data, Metric.batchSize, { [Attr.batchResult]: "committed" }),
      batches.length,
      "each batch counted by how it ended",
    );
  });

  it("a first delivery whose marker exists, met at the marker insert the handlers ran beside: the batch says duplicate and MarkerExistsError", async function () {
    // The worker's default pre-check (redeliveries): first deliveries are not read for, so the handlers start early.
    const lean = await openDatabase(
      { kind: "postgres", url: db.url },
      { preCheck: "redeliveries", maxConnections: 10 },
    );
    try {
      const keys = [0, 1, 2, 3].map((i) => `batch-resent-${i}`);
      // keys[2] was processed before and is now resent past the duplicate window: a first delivery again.
      const resent = deriveMessageId("AccountCredited", keys[2]!);
      const marked = await lean.store.process({ messageId: resent, consumer: "test" }, () =>
        Promise.resolve(),
      );
      assert.equal(marked.kind, "committed");
      const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
      for (const key of keys) await publisher.publish("AccountCredited", key, { accountId: key, amount: 1 });
      await publisher.close();
      const before = telemetry().spansNamed(SpanName.inboxBatch).length;
      const worker = startTestWorker({ client: fixture.client, db: lean, batchSize: 4, batchWaitMs: 100 });
      try {
        await waitUntil(() => worker.stats.settled === 4, "all are settled");
      } finally {
        await worker.stop();
      }
      const batch = telemetry().spansNamed(SpanName.inboxBatch).slice(before);
      assert.equal(batch.length, 1, "the four went as one batch");
      assert.equal(batch[0]!.attributes[Attr.errorType], "MarkerExistsError");
      assert.equal(batch[0]!.attributes[Attr.batchCommitted], 0, "it rolled back");
      const data = await telemetry().collect();
      assert.equal(metricTotal(data, Metric.batchSize, { [Attr.batchResult]: "duplicate" }), 1);
      const outcomes = new Map(
        telemetry()
          .spansNamed(`process ${QUEUE}`)
          .map((p) => [String(p.attributes[Attr.messageId]), String(p.attributes[Attr.outcome])]),
      );
      assert.equal(outcomes.get(resent), "duplicate", "the resend is a duplicate");
      for (const key of keys.filter((k) => k !== keys[2]))
        assert.equal(outcomes.get(deriveMessageId("AccountCredited", key)), "committed", `${key}, alone`);
      assert.equal(worker.stats.committed, 3);
      assert.equal(worker.stats.duplicate, 1);
    } finally {
      await lean.close();
    }
  });
});

describe("group commit telemetry, sampled out: no batch span, no statement span, every metric", function () {
  const fixture = useLocalBroker();
  let db: Database & { url: string };
  let capture: TelemetryCapture | undefined;
  const asked: string[] = [];
  before(async () => {
    db = await exampleDatabase("telemetry_batch_sampled_out");
    // OTEL_TRACES_SAMPLER=parentbased_traceidratio at 0, seeing every span the SDK is asked to start.
    const inner = new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(0) });
    const sampler: Sampler = {
      shouldSample: (ctx, traceId, name, kind, attributes, links) => {
        asked.push(name);
        return inner.shouldSample(ctx, traceId, name, kind, attributes, links);
      },
      toString: () => "counting",
    };
    capture = installTelemetryCapture({ sampler });
  });
  after(async () => {
    await capture?.stop();
    await db.close();
  });

  it("the batches run with no span of theirs; their messages' metrics all count", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    for (let i = 0; i < 8; i += 1)
      await publisher.publish("AccountCredited", `batch-untraced-${i}`, { accountId: "u", amount: 1 });
    await publisher.close();
    await capture!.reset();
    asked.length = 0;
    const worker = startTestWorker({ client: fixture.client, db, batchSize: 4, batchWaitMs: 100 });
    try {
      await waitUntil(() => worker.stats.settled === 8, "all are settled");
    } finally {
      await worker.stop();
    }
    const perMessage = asked.filter((name) => name === `process ${QUEUE}`).length;
    assert.equal(perMessage, 8, "one process span asked for per message");
    // The worker's own chores (a claim sweep at start) may start root spans; nothing per message or per batch.
    const started = new Set(asked);
    for (const name of [
      SpanName.inboxBatch,
      SpanName.inboxTransaction,
      "INSERT Inbox",
      "COMMIT",
      `complete ${QUEUE}`,
    ])
      assert.ok(!started.has(name), `${name} was started: ${[...started].join(", ")}`);
    assert.deepEqual(
      capture!.spans().filter((s) => s.name === `process ${QUEUE}`),
      [],
    );
    const data = await capture!.collect();
    assert.ok(metricTotal(data, Metric.batchSize) >= 1, "the batches are counted");
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "committed" }), 8);
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "complete" }), 8);
    assert.equal(metricTotal(data, Metric.consumedMessages), 8);
    assert.equal(await countCredits(db), 8, "each message had its effect");
  });
});
