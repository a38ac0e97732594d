import assert from "node:assert/strict";
import { SpanKind } from "@opentelemetry/api";
import type { Database } from "../../src/app/database.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { Attr } from "../../src/telemetry/names.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";

describe("worker spans: process linked to the producer, settlement as a child", function () {
  const fixture = useLocalBroker();
  const telemetry = useTelemetryCapture();
  let db: Database;
  before(async () => {
    db = await exampleDatabase("worker_tracing");
  });
  after(async () => {
    await db.close();
  });

  it("a committed message and a poison one", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    await publisher.publish("AccountCredited", "traced-1", { accountId: "a", amount: 1 });
    await publisher.publish("AccountCredited", "traced-2", { accountId: "a", amount: -1 });
    await publisher.close();
    const worker = startTestWorker({ client: fixture.client, db });
    try {
      await waitUntil(() => worker.stats.settled === 2, "both are settled");
    } finally {
      await worker.stop();
    }
    const sends = telemetry().spansNamed(`send ${QUEUE}`);
    const processes = telemetry().spansNamed(`process ${QUEUE}`);
    assert.equal(sends.length, 2);
    assert.equal(processes.length, 2);
    for (const p of processes) {
      assert.equal(p.kind, SpanKind.CONSUMER);
      assert.equal(p.attributes[Attr.messagingSystem], "servicebus");
      assert.equal(p.attributes[Attr.destinationName], QUEUE);
      const link = p.links[0]?.context;
      assert.ok(
        sends.some(
          (s) => s.spanContext().spanId === link?.spanId && s.spanContext().traceId === link?.traceId,
        ),
        "linked to its send span",
      );
    }
    const committed = processes.find((p) => p.attributes[Attr.outcome] === "committed");
    const poison = processes.find((p) => p.attributes[Attr.outcome] === "poison");
    assert.equal(committed?.attributes[Attr.dispositionStatus], "complete");
    assert.equal(poison?.attributes[Attr.dispositionStatus], "dead_letter");
    assert.equal(poison?.attributes[Attr.deadLetterReason], "SchemaViolation");
    const complete = telemetry().spansNamed(`complete ${QUEUE}`)[0];
    assert.equal(complete?.parentSpanContext?.spanId, committed?.spanContext().spanId);
    const deadLetter = telemetry().spansNamed(`dead_letter ${QUEUE}`)[0];
    assert.equal(deadLetter?.parentSpanContext?.spanId, poison?.spanContext().spanId);
  });
});
