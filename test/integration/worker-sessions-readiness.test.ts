import assert from "node:assert/strict";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { capturedLogs } from "../helpers/logs.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

/** Thresholds scaled down: what is tested is that refused accepts alone turn readiness, not the wall clock. */
const PROGRESS = { quietMs: 300, probeTimeoutMs: 2_000, silentAfterMs: 3_000, recoverAfterMs: 1_000 };

/**
 * Session mode's readiness when the broker refuses receiving, as plain mode's (worker-forward-source.test.ts): every
 * accept of a session is refused (here the entity is missing, as after a deletion) while the connection answers, so
 * /readyz says `serviceBus: "refused"`, not ok; beside it, a session worker whose accepts are taken stays ok.
 */
describe("worker in session mode: readiness when the broker refuses the session receiver", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ ordered: { RequiresSession: true } }));

  it("refused accepts, none taken: /readyz says refused; taken ones (no session free) keep it ok", async function () {
    const db = await exampleDatabase("sessions_refused");
    const logs = capturedLogs();
    const workers: Worker[] = [];
    try {
      const refused = startTestWorker({
        client: fixture.client,
        db,
        queue: "no-such-queue",
        sessions: { maxSessions: 2 },
        logger: logs.logger,
        progress: PROGRESS,
      });
      workers.push(refused);
      const taking = startTestWorker({
        client: fixture.client,
        db,
        queue: "ordered",
        consumer: "taking",
        sessions: { maxSessions: 2 },
        progress: PROGRESS,
      });
      workers.push(taking);
      await waitUntil(
        () =>
          logs.lines.some((l) => String(l.msg).startsWith("Service Bus refuses the worker's receive link")),
        "the refusal is logged",
        PROGRESS.silentAfterMs + 10_000,
      );
      const readiness = await refused.readiness();
      assert.equal(readiness.serviceBus, "refused");
      assert.equal(readiness.ready, false);
      assert.ok(
        logs.lines.some((l) => l.msg === "accepting a session failed; trying again"),
        "the refused accepts are logged",
      );
      const ok = await taking.readiness();
      assert.equal(ok.serviceBus, "ok", "accepts that wait for a session are not refusals");
      assert.equal(ok.ready, true);
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
      await db.close();
    }
  });
});
