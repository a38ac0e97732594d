import assert from "node:assert/strict";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { capturedLogs } from "../helpers/logs.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

/** Thresholds scaled down: what is tested is that errors alone turn readiness, not the wall clock. */
const PROGRESS = { quietMs: 300, probeTimeoutMs: 2_000, silentAfterMs: 3_000, recoverAfterMs: 1_000 };

describe("worker: readiness when the broker refuses receiving (a queue that forwards)", function () {
  const fixture = useLocalBroker(brokerConfig({ sbinbox: { ForwardTo: "dest" }, dest: {} }));

  it("the peeks are answered but every receive is refused: /readyz says refused, not ok", async function () {
    this.timeout(60_000);
    const db = await exampleDatabase("forward_source");
    const logs = capturedLogs();
    let worker: Worker | undefined;
    try {
      worker = startTestWorker({ client: fixture.client, db, logger: logs.logger, progress: PROGRESS });
      await waitUntil(
        () =>
          logs.lines.some((l) => String(l.msg).startsWith("Service Bus refuses the worker's receive link")),
        "the refusal is logged",
        PROGRESS.silentAfterMs + 10_000,
      );
      const readiness = await worker.readiness();
      assert.equal(readiness.serviceBus, "refused");
      assert.equal(readiness.ready, false);
      const errors = logs.lines.filter((l) => l.msg === "receive error");
      assert.ok(errors.length >= 2, `receive errors seen: ${errors.length}`);
      assert.ok(
        errors.every((l) => l.source === "receive"),
        "the refusals come as receive errors",
      );
    } finally {
      await worker?.stop();
      await db.close();
    }
  });
});
