import assert from "node:assert/strict";
import { context, isSpanContextValid, ROOT_CONTEXT, trace, TraceFlags } from "@opentelemetry/api";
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
      sizes.reduce((a, b) => a + b, 0) - batches.length,
      "every batched message's process span but the batch's parent links to its batch",
    );
    for (const b of batches) {
      // A child of its first message's process span, so a parent-based sampler keeps it with that message.
      assert.ok(
        processIds.has(b.parentSpanContext?.spanId ?? ""),
        "the batch span's parent is a process span",
      );
      const parent = processes.find((p) => p.spanContext().spanId === b.parentSpanContext?.spanId);
      assert.equal(b.spanContext().traceId, parent?.spanContext().traceId);
      assert.equal(b.links.length, Number(b.attributes[Attr.batchMessageCount]) - 1);
      assert.ok(
        b.links.every((l) => processIds.has(l.context.spanId)),
        "it links to its other messages' spans",
      );
      assert.equal(b.attributes[Attr.batchCommitted], b.links.length + 1);
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
  /** Per span name asked for, the trace ids it was asked in and whether it had a (valid) parent. */
  const traces = new Map<string, { traceId: string; parented: boolean }[]>();
  before(async () => {
    db = await exampleDatabase("telemetry_batch_sampled_out");
    // OTEL_TRACES_SAMPLER=parentbased_traceidratio at 0, seeing every span the SDK is asked to start.
    const inner = new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(0) });
    const sampler: Sampler = {
      shouldSample: (ctx, traceId, name, kind, attributes, links) => {
        asked.push(name);
        const parent = trace.getSpanContext(ctx);
        const seen = traces.get(name) ?? [];
        seen.push({ traceId, parented: parent !== undefined && isSpanContextValid(parent) });
        traces.set(name, seen);
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

  it("a library's span inside an all-sampled-out batch is a non-recorded child in a message's trace, not a root", async function () {
    // What pg/mssql instrumentation does inside the batch's transaction: start a span in the active context.
    const original = db.store.processBatch!.bind(db.store);
    db.store.processBatch = (consumer, items) =>
      trace.getTracer("third-party").startActiveSpan("pg.query", (span) => {
        span.end();
        return original(consumer, items);
      });
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    for (let i = 0; i < 4; i += 1)
      await publisher.publish("AccountCredited", `batch-library-${i}`, { accountId: "l", amount: 1 });
    await publisher.close();
    await capture!.reset();
    traces.clear();
    const worker = startTestWorker({ client: fixture.client, db, batchSize: 4, batchWaitMs: 100 });
    try {
      await waitUntil(() => worker.stats.settled === 4, "all are settled");
    } finally {
      await worker.stop();
      db.store.processBatch = original;
    }
    const library = traces.get("pg.query") ?? [];
    assert.ok(library.length >= 1, "a batch ran");
    const messageTraces = new Set((traces.get(`process ${QUEUE}`) ?? []).map((t) => t.traceId));
    for (const t of library) {
      assert.ok(t.parented, "the library's span has the message's process span as parent");
      assert.ok(messageTraces.has(t.traceId), `its trace ${t.traceId} is a message's`);
    }
    assert.deepEqual(
      capture!.spans().filter((s) => s.name === "pg.query"),
      [],
    );
  });

  it("a batch of producer-sampled and sampled-out messages at ratio 0: its span and statements are recorded in a kept message's trace", async function () {
    const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
    const producer = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: TRACE,
      spanId: "00f067aa0ba902b7",
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    });
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    for (let i = 0; i < 4; i += 1)
      await context.with(producer, () =>
        publisher.publish("AccountCredited", `batch-mixed-kept-${i}`, { accountId: "k", amount: 1 }),
      );
    for (let i = 0; i < 4; i += 1)
      await publisher.publish("AccountCredited", `batch-mixed-out-${i}`, { accountId: "k", amount: 1 });
    await publisher.close();
    await capture!.reset();
    const worker = startTestWorker({
      client: fixture.client,
      db,
      batchSize: 8,
      batchWaitMs: 200,
      maxConcurrentCalls: 8,
    });
    try {
      await waitUntil(() => worker.stats.settled === 8, "all are settled");
    } finally {
      await worker.stop();
    }
    const spans = capture!.spans();
    const kept = spans.filter((s) => s.name === `process ${QUEUE}`);
    assert.equal(kept.length, 4, "the four producer-sampled messages are recorded");
    assert.ok(kept.every((s) => s.spanContext().traceId === TRACE));
    const batches = spans.filter((s) => s.name === SpanName.inboxBatch);
    assert.ok(batches.length >= 1, `a batch span is recorded: ${spans.map((s) => s.name).join(", ")}`);
    const keptIds = new Set(kept.map((s) => s.spanContext().spanId));
    for (const b of batches) {
      assert.equal(b.spanContext().traceId, TRACE, "in the kept messages' trace");
      assert.ok(keptIds.has(b.parentSpanContext?.spanId ?? ""), "a child of a kept process span");
      const children = spans.filter((s) => s.parentSpanContext?.spanId === b.spanContext().spanId);
      for (const name of ["BEGIN", "INSERT Inbox", "COMMIT"])
        assert.ok(
          children.some((s) => s.name === name),
          `${name} under the batch: ${children.map((s) => s.name).join(", ")}`,
        );
    }
    // Each kept message is its batch's parent or links to it: no link to a span that was not exported.
    const batchIds = new Set(batches.map((b) => b.spanContext().spanId));
    const parents = new Set(batches.map((b) => b.parentSpanContext?.spanId));
    for (const p of kept)
      assert.ok(
        parents.has(p.spanContext().spanId) || p.links.some((l) => batchIds.has(l.context.spanId)),
        "each kept message's batch span is recorded",
      );
  });
});
