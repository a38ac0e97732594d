import assert from "node:assert/strict";
import { SpanKind } from "@opentelemetry/api";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { Attr, Metric, SpanEvent } from "../../src/telemetry/names.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "retrytel";

describe("retry telemetry: attempt on the process span, retry events and spans, the retries counter", function () {
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { LockDuration: "PT5S" } }));
  const telemetry = useTelemetryCapture();
  let db: Database;
  before(async () => {
    db = await exampleDatabase("retry_telemetry");
  });
  after(async () => {
    await db.close();
  });

  it("waited, scheduled and exhausted each show up", async function () {
    const handler: MessageHandler = {
      kind: "two-phase",
      type: "Ping",
      schema: z.object({ ok: z.boolean() }),
      perform(body, context) {
        // "good" fails twice then succeeds (a wait, then a scheduled copy); "bad" always fails.
        if (!(body as { ok: boolean }).ok || context.attempt < 3)
          return Promise.reject(new Error("upstream 503"));
        return Promise.resolve();
      },
    };
    await sendRawMessages(fixture.client, QUEUE, [
      { messageId: "good", subject: "Ping", body: Buffer.from('{"ok":true}') },
      { messageId: "bad", subject: "Ping", body: Buffer.from('{"ok":false}') },
    ]);
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: QUEUE,
      handlers: [handler],
      // The first retry waits in place (100 ms), the second is scheduled (over the 200 ms limit), then none left.
      retryPolicy: {
        ...defaultRetryPolicy,
        jitter: 0,
        transientDelaysMs: [100, 300],
        maxInProcessWaitMs: 200,
      },
    });
    try {
      await waitUntil(
        () => worker.stats.committed === 1 && worker.stats.retriesExhausted === 1,
        "both end",
        15_000,
      );
    } finally {
      await worker.stop();
    }
    const processes = telemetry().spansNamed(`process ${QUEUE}`);
    const finalGood = processes.find((p) => p.attributes[Attr.outcome] === "committed");
    assert.equal(finalGood?.attributes[Attr.attempt], 3, "the copy ran attempt 3");
    const firstGood = processes.find(
      (p) => p.attributes[Attr.messageId] === "good" && p.attributes[Attr.attempt] === 2,
    );
    assert.ok(firstGood, "the first delivery ended on attempt 2, after one wait");
    assert.deepEqual(
      firstGood.events.map((e) => e.name),
      [SpanEvent.retryWaited, SpanEvent.retryScheduled],
    );
    const schedule = telemetry().spansNamed(`schedule ${QUEUE}`);
    assert.ok(schedule.length >= 2, "one schedule span per scheduled retry");
    assert.equal(schedule[0]?.kind, SpanKind.PRODUCER);
    assert.equal(schedule[0]?.parentSpanContext?.spanId !== undefined, true);
    const exhausted = processes.find((p) => p.attributes[Attr.deadLetterReason] === "RetriesExhausted");
    assert.equal(exhausted?.attributes[Attr.attempt], 3);
    const data = await telemetry().collect();
    assert.equal(metricTotal(data, Metric.retries, { [Attr.retryOutcome]: "waited" }), 2);
    assert.equal(metricTotal(data, Metric.retries, { [Attr.retryOutcome]: "scheduled" }), 2);
    assert.equal(metricTotal(data, Metric.retries, { [Attr.retryOutcome]: "exhausted" }), 1);
  });
});
