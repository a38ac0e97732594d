import assert from "node:assert/strict";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import type { TransactionalHandler } from "../../src/domain/handler.ts";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import {
  ACCOUNT_CREDITED,
  accountCreditedHandler,
  WELCOME_EMAIL_REQUESTED,
  welcomeEmailHandler,
  type Mailer,
} from "../../src/example/index.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { Attr, Metric, SpanEvent, SpanName } from "../../src/telemetry/names.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { capturedLogs } from "../helpers/logs.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";
import { histogramOf, metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";

const QUEUE = "traced";
const CONSUMER = "test";
const MAX_DELIVERY = 2;
const OUTAGE_QUEUE = "traced-outage";

describe("telemetry: every path traced and measured (real SDK, local broker, PostgreSQL)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT1S", MaxDeliveryCount: MAX_DELIVERY, RequiresDuplicateDetection: true },
      [OUTAGE_QUEUE]: { LockDuration: "PT1S", MaxDeliveryCount: 5, RequiresDuplicateDetection: true },
    }),
  );
  const telemetry = useTelemetryCapture();
  let db: Database;
  const workers: Worker[] = [];

  before(async () => {
    db = await exampleDatabase("telemetry_paths");
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
  });
  after(async () => {
    await db?.close();
  });

  function start(options: Partial<Parameters<typeof startTestWorker>[0]> = {}, on: Database = db): Worker {
    const worker = startTestWorker({
      client: fixture.client,
      db: on,
      queue: QUEUE,
      consumer: CONSUMER,
      ...options,
    });
    workers.push(worker);
    return worker;
  }

  async function publish(
    key: string,
    body: unknown,
    type = ACCOUNT_CREDITED,
    correlationId?: string,
    queue = QUEUE,
  ) {
    const publisher = createPublisher({ client: fixture.client, queue });
    try {
      return (await publisher.publish(type, key, body, correlationId ? { correlationId } : {})).messageId;
    } finally {
      await publisher.close();
    }
  }

  const spans = () => telemetry().spans();
  const processSpans = (messageId: string, queue = QUEUE) =>
    spans().filter((s) => s.name === SpanName.process(queue) && s.attributes[Attr.messageId] === messageId);
  const childrenOf = (parent: ReadableSpan) =>
    spans().filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId);
  const childNamed = (parent: ReadableSpan, name: string): ReadableSpan => {
    const found = childrenOf(parent).filter((s) => s.name === name);
    assert.equal(
      found.length,
      1,
      `${name} under ${parent.name}: ${childrenOf(parent)
        .map((s) => s.name)
        .join(", ")}`,
    );
    return found[0]!;
  };
  const waitForProcessSpans = (messageId: string, n: number, queue = QUEUE) =>
    waitUntil(
      () => processSpans(messageId, queue).length >= n,
      `${n} process span(s) of ${messageId}`,
      20_000,
    );

  function assertMessagingAttributes(span: ReadableSpan, messageId: string): void {
    assert.equal(span.kind, SpanKind.CONSUMER);
    assert.equal(span.attributes[Attr.messagingSystem], "servicebus");
    assert.equal(span.attributes[Attr.operationName], "process");
    assert.equal(span.attributes[Attr.operationType], "process");
    assert.equal(span.attributes[Attr.destinationName], QUEUE);
    assert.equal(span.attributes[Attr.messageId], messageId);
    assert.equal(typeof span.attributes[Attr.deliveryCount], "number");
  }

  function assertSettlement(process: ReadableSpan, disposition: string): ReadableSpan {
    const settle = childNamed(process, `${disposition} ${QUEUE}`);
    assert.equal(settle.kind, SpanKind.CLIENT);
    assert.equal(settle.attributes[Attr.dispositionStatus], disposition);
    assert.equal(settle.attributes[Attr.operationType], "settle");
    assert.equal(settle.attributes[Attr.destinationName], QUEUE);
    return settle;
  }

  it("committed: the publish, its processing, the inbox transaction and the complete are one trace", async () => {
    const messageId = await publish(
      "committed-1",
      { accountId: "a1", amount: 5 },
      ACCOUNT_CREDITED,
      "conv-1",
    );
    start();
    await waitForProcessSpans(messageId, 1);

    const [send] = spans().filter((s) => s.name === SpanName.send(QUEUE));
    assert.ok(send, "a send span");
    assert.equal(send.kind, SpanKind.PRODUCER);
    assert.equal(send.attributes[Attr.messagingSystem], "servicebus");
    assert.equal(send.attributes[Attr.operationName], "send");
    assert.equal(send.attributes[Attr.messageId], messageId);

    const [process] = processSpans(messageId);
    assert.ok(process);
    assertMessagingAttributes(process, messageId);
    assert.equal(process.spanContext().traceId, send.spanContext().traceId, "one trace");
    assert.equal(process.parentSpanContext?.spanId, send.spanContext().spanId, "the send span is the parent");
    assert.deepEqual(
      process.links.map((l) => l.context.spanId),
      [send.spanContext().spanId],
      "and it is linked",
    );
    assert.equal(process.attributes[Attr.conversationId], "conv-1");
    assert.equal(process.attributes[Attr.deliveryCount], 1, "the first attempt");
    assert.equal(process.attributes[Attr.outcome], "committed");
    assert.equal(process.attributes[Attr.dispositionStatus], "complete");
    assert.equal(process.attributes[Attr.errorType], undefined);
    assert.equal(process.status.code, SpanStatusCode.UNSET);

    const tx = childNamed(process, SpanName.inboxTransaction);
    assert.equal(tx.attributes[Attr.dbSystem], "postgresql");
    assert.equal(tx.attributes[Attr.outcome], "committed");
    assert.ok(
      childrenOf(tx).some((s) => s.attributes[Attr.inboxStatement] === "insertProcessedMarker"),
      "the marker insert is under the transaction",
    );
    assertSettlement(process, "complete");

    const data = await telemetry().collect();
    assert.equal(metricTotal(data, Metric.consumedMessages, { [Attr.destinationName]: QUEUE }), 1);
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "committed" }), 1);
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "complete" }), 1);
    assert.equal(histogramOf(data, Metric.processDuration, { [Attr.destinationName]: QUEUE }).count, 1);
    assert.equal(metricTotal(data, Metric.duplicatesAbsorbed), 0);
  });

  it("on the wire, a published message carries its send span's context as traceparent and Diagnostic-Id", async () => {
    const messageId = await publish("wire-1", { accountId: "a1", amount: 1 });
    const receiver = fixture.client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
    const [received] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
    await receiver.close();
    assert.equal(received?.messageId, messageId);
    const [send] = spans().filter((s) => s.name === SpanName.send(QUEUE));
    assert.ok(send);
    const expected = `00-${send.spanContext().traceId}-${send.spanContext().spanId}-01`;
    assert.equal(received.applicationProperties?.traceparent, expected);
    assert.equal(received.applicationProperties?.["Diagnostic-Id"], expected);
  });

  it("duplicate: a message whose marker exists is completed, and counted as absorbed", async () => {
    const messageId = deriveMessageId(ACCOUNT_CREDITED, "duplicate-1");
    // The first handling committed and its complete was lost: the marker is there, the message is not settled.
    assert.equal(
      (await db.store.process({ messageId, consumer: CONSUMER }, () => Promise.resolve())).kind,
      "committed",
    );
    await telemetry().reset();
    assert.equal(await publish("duplicate-1", { accountId: "a1", amount: 5 }), messageId);
    start();
    await waitForProcessSpans(messageId, 1);

    const [process] = processSpans(messageId);
    assert.ok(process);
    assertMessagingAttributes(process, messageId);
    assert.equal(process.attributes[Attr.outcome], "duplicate");
    assert.equal(process.attributes[Attr.dispositionStatus], "complete");
    assert.equal(childNamed(process, SpanName.inboxTransaction).attributes[Attr.outcome], "duplicate");
    assertSettlement(process, "complete");
    assert.equal((await creditsPerMessage(db)).get(messageId), undefined, "no effect from the duplicate");

    const data = await telemetry().collect();
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "duplicate" }), 1);
    assert.equal(metricTotal(data, Metric.duplicatesAbsorbed, { [Attr.destinationName]: QUEUE }), 1);
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "complete" }), 1);
  });

  it("poison: dead-lettered at once, with the reason as error.type and no inbox transaction", async () => {
    const sender = fixture.client.createSender(QUEUE);
    await sender.sendMessages({ messageId: "poison-1", subject: "NoSuchEvent", body: Buffer.from("{}") });
    await sender.close();
    const logs = capturedLogs();
    start({ logger: logs.logger });
    await waitForProcessSpans("poison-1", 1);

    const [process] = processSpans("poison-1");
    assert.ok(process);
    assertMessagingAttributes(process, "poison-1");
    assert.equal(process.attributes[Attr.outcome], "poison");
    assert.equal(process.attributes[Attr.dispositionStatus], "dead_letter");
    assert.equal(process.attributes[Attr.errorType], "UnknownMessageType");
    assert.equal(process.attributes[Attr.deadLetterReason], "UnknownMessageType");
    assert.equal(process.status.code, SpanStatusCode.ERROR);
    assert.equal(childrenOf(process).filter((s) => s.name === SpanName.inboxTransaction).length, 0);
    assertSettlement(process, "dead_letter");
    const line = logs.lines.find((l) => l.msg === "message dead-lettered");
    assert.deepEqual(
      line && [line.trace_id, line.span_id, line.reason],
      [process.spanContext().traceId, process.spanContext().spanId, "UnknownMessageType"],
      "the log line joins the trace",
    );

    const data = await telemetry().collect();
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "poison" }), 1);
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "dead_letter" }), 1);
    assert.equal(
      histogramOf(data, Metric.processDuration, { [Attr.errorType]: "UnknownMessageType" }).count,
      1,
    );
  });

  it("failed, retried in place, then dead-lettered: one process span in the publish's trace, with the SQLSTATE", async () => {
    await db.sql.query("CREATE TABLE IF NOT EXISTS telemetry_taken (k text PRIMARY KEY)");
    await db.sql.query("INSERT INTO telemetry_taken VALUES ('taken') ON CONFLICT DO NOTHING");
    const failing: TransactionalHandler<{ k: string }> = {
      kind: "transactional",
      type: "TakeKey",
      schema: z.object({ k: z.string() }),
      async handle(body, tx) {
        await tx.query("INSERT INTO telemetry_taken (k) VALUES ($1)", [body.k]);
      },
    };
    const dead = fixture.broker.counts(QUEUE).deadLettered;
    const messageId = await publish("failing-1", { k: "taken" }, "TakeKey");
    // A unique violation on a business table is permanent: one retry (here after 200 ms), then dead-lettered.
    start({
      handlers: [failing],
      retryPolicy: { ...defaultRetryPolicy, jitter: 0, permanentDelaysMs: [200] },
    });
    await waitUntil(
      () => fixture.broker.counts(QUEUE).deadLettered === dead + 1,
      "the worker dead-letters it",
    );
    await waitForProcessSpans(messageId, 1);

    const [send] = spans().filter((s) => s.name === SpanName.send(QUEUE));
    assert.ok(send);
    const deliveries = processSpans(messageId);
    assert.equal(deliveries.length, 1, "one delivery: the retry waited under the lock");
    const process = deliveries[0]!;
    assertMessagingAttributes(process, messageId);
    assert.equal(process.attributes[Attr.deliveryCount], 1);
    assert.equal(process.spanContext().traceId, send.spanContext().traceId);
    assert.equal(process.parentSpanContext?.spanId, send.spanContext().spanId);
    assert.equal(process.attributes[Attr.outcome], "failed");
    assert.equal(process.attributes[Attr.attempt], 2);
    assert.equal(process.attributes[Attr.dispositionStatus], "dead_letter");
    assert.equal(process.attributes[Attr.deadLetterReason], "RetriesExhausted");
    assert.equal(process.status.code, SpanStatusCode.ERROR);
    assert.deepEqual(
      process.events.map((e) => [e.name, e.attributes?.[Attr.errorType]]),
      [[SpanEvent.retryWaited, "23505"]],
    );
    const txs = childrenOf(process).filter((c) => c.name === SpanName.inboxTransaction);
    assert.equal(txs.length, 2, "one inbox transaction per attempt");
    for (const tx of txs) {
      assert.equal(tx.attributes[Attr.dbStatusCode], "23505");
      assert.equal(tx.attributes[Attr.outcome], "failed");
    }
    assertSettlement(process, "dead_letter");

    const data = await telemetry().collect();
    assert.equal(metricTotal(data, Metric.consumedMessages), 1);
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "failed" }), 1);
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "dead_letter" }), 1);
    assert.equal(metricTotal(data, Metric.retries, { [Attr.retryOutcome]: "waited" }), 1);
    assert.equal(metricTotal(data, Metric.retries, { [Attr.retryOutcome]: "exhausted" }), 1);
    assert.equal(
      histogramOf(data, Metric.processDuration, { [Attr.errorType]: "RetriesExhausted" }).count,
      1,
    );
  });

  it("a settlement that fails with a lost lock: an error on the complete span, counted, absorbed next time", async () => {
    // The first delivery's handler waits, inside its open transaction, until the broker has taken the lock back.
    let held = false;
    const inner = accountCreditedHandler();
    const slowOnce: TransactionalHandler = {
      ...inner,
      async handle(body, tx, context) {
        if (!held) {
          held = true;
          await waitUntil(() => fixture.broker.counts(QUEUE).locked === 0, "the lock lapses", 10_000);
        }
        await inner.handle(body as never, tx, context);
      },
    };
    const messageId = await publish("lock-lost-1", { accountId: "a4", amount: 2 });
    // One message at a time and no lock renewal: the redelivery waits until the first attempt has settled.
    const logs = capturedLogs();
    start({ handlers: [slowOnce], maxAutoLockRenewalMs: 0, maxConcurrentCalls: 1, logger: logs.logger });
    await waitForProcessSpans(messageId, 2);

    const [first, second] = processSpans(messageId).sort(
      (a, b) => Number(a.attributes[Attr.deliveryCount]) - Number(b.attributes[Attr.deliveryCount]),
    );
    assert.ok(first && second);
    assert.equal(first.attributes[Attr.outcome], "committed");
    assert.equal(first.attributes[Attr.errorType], "MessageLockLost");
    assert.equal(first.status.code, SpanStatusCode.ERROR);
    const complete = assertSettlement(first, "complete");
    assert.equal(complete.attributes[Attr.errorType], "MessageLockLost");
    assert.equal(complete.status.code, SpanStatusCode.ERROR);
    assert.equal(second.attributes[Attr.outcome], "duplicate");
    assert.equal(second.status.code, SpanStatusCode.UNSET);
    assertSettlement(second, "complete");
    assert.equal((await creditsPerMessage(db)).get(messageId), 1, "one effect");
    const line = logs.lines.find((l) => String(l.msg).startsWith("settlement failed"));
    assert.deepEqual(
      line && [line.trace_id, line.span_id, line.code],
      [first.spanContext().traceId, first.spanContext().spanId, "MessageLockLost"],
      "the settlement failure is logged in the message's trace",
    );

    const data = await telemetry().collect();
    assert.equal(
      metricTotal(data, Metric.settlementFailures, {
        [Attr.dispositionStatus]: "complete",
        [Attr.errorType]: "MessageLockLost",
      }),
      1,
    );
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "complete" }), 1);
    assert.equal(metricTotal(data, Metric.duplicatesAbsorbed), 1);
  });

  it("two-phase: claim and completion spans, and the open claim counted while the effect runs", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let performing = false;
    const mailer: Mailer = {
      async send() {
        performing = true;
        await gate;
      },
    };
    const messageId = await publish(
      "welcome-1",
      { userId: "u1", email: "u1@example.com" },
      WELCOME_EMAIL_REQUESTED,
    );
    start({ handlers: [welcomeEmailHandler(mailer)] });
    await waitUntil(() => performing, "the external effect is under way");
    assert.equal(metricTotal(await telemetry().collect(), Metric.openClaims), 1, "one open claim");
    release();
    await waitForProcessSpans(messageId, 1);
    const after = await telemetry().collect();
    const points = after.find((m) => m.descriptor.name === Metric.openClaims)?.dataPoints ?? [];
    assert.deepEqual(
      points.map((p) => p.value),
      [0],
      "observed again, and now none is open",
    );

    const [process] = processSpans(messageId);
    assert.ok(process);
    assert.equal(process.attributes[Attr.outcome], "committed");
    assert.equal(childNamed(process, SpanName.inboxClaim).attributes[Attr.outcome], "claimed");
    childNamed(process, SpanName.inboxMarkProcessed);
    assertSettlement(process, "complete");
  });

  describe("a database outage", () => {
    let server: EmbeddedPostgresServer;
    let own: Database;
    before(async function () {
      this.timeout(120_000);
      server = await EmbeddedPostgresServer.create();
      own = await exampleDatabase("telemetry_outage", await server.createDatabase("telemetry_outage"));
    });
    after(async function () {
      this.timeout(60_000);
      await own?.close();
      await server?.dispose();
    });

    it("holds the delivery that met it until the database answers, pauses receiving, and records the pause", async () => {
      const worker = start({ queue: OUTAGE_QUEUE }, own);
      const before = await publish(
        "outage-before",
        { accountId: "a5", amount: 1 },
        ACCOUNT_CREDITED,
        undefined,
        OUTAGE_QUEUE,
      );
      await waitForProcessSpans(before, 1, OUTAGE_QUEUE);
      await server.stop();
      const messageId = await publish(
        "outage-during",
        { accountId: "a5", amount: 1 },
        ACCOUNT_CREDITED,
        undefined,
        OUTAGE_QUEUE,
      );
      await waitUntil(() => worker.paused, "the worker pauses receiving", 10_000);
      await server.start();
      await waitUntil(
        () => processSpans(messageId, OUTAGE_QUEUE).some((s) => s.attributes[Attr.outcome] === "committed"),
        "applied after the outage",
        30_000,
      );
      await waitUntil(() => !worker.paused, "receiving resumed");

      // One delivery: it waited for the database under its lock and committed, with no abandon to spend.
      const processes = processSpans(messageId, OUTAGE_QUEUE);
      assert.equal(processes.length, 1, "one delivery, held through the outage");
      const process = processes[0]!;
      assert.equal(process.attributes[Attr.outcome], "committed");
      assert.equal(process.attributes[Attr.dispositionStatus], "complete");
      const attempts = childrenOf(process).filter((s) => s.name === SpanName.inboxTransaction);
      assert.ok(attempts.length >= 2, `a failed attempt and the committed one: ${attempts.length}`);
      assert.equal(attempts[0]!.attributes[Attr.outcome], "failed");
      assert.equal(typeof attempts[0]!.attributes[Attr.errorType], "string");
      assert.equal(attempts.at(-1)!.attributes[Attr.outcome], "committed");

      assert.equal(
        fixture.broker.counts(OUTAGE_QUEUE).deadLettered,
        0,
        "nothing burned into the dead-letter queue",
      );
      assert.equal((await creditsPerMessage(own)).get(messageId), 1, "applied once");

      const data = await telemetry().collect();
      const pause = histogramOf(data, Metric.outagePause);
      assert.equal(pause.count, 1, "one pause");
      assert.ok(pause.sum > 0, `paused ${pause.sum} s`);
      assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "failed" }), 0, "nothing abandoned");
    });
  });
});
