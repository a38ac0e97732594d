/**
 * Outcomes the worker does not decide: a dead-letter the broker makes itself (the delivery count reached), and an
 * outcome still awaited when the harness stops.
 */
import assert from "node:assert/strict";
import { z } from "zod";
import type { MessageHandler } from "sbinbox";
import { startHarness, type Harness } from "sbinbox-dev/testing";

describe("the test harness: outcomes the broker decides", function () {
  this.timeout(60_000);
  let harness: Harness;
  let calls = 0;
  // The handler's own connection ended under it (admin_shutdown, 57P01) is "unavailable": the worker abandons the
  // message and leaves the count to the broker, which dead-letters it once its delivery count reaches the maximum.
  const unreachable: MessageHandler = {
    kind: "transactional",
    type: "Unreachable",
    schema: z.object({}),
    async handle(_body, tx) {
      calls += 1;
      await tx.query("SELECT pg_terminate_backend(pg_backend_pid())");
    },
  };
  before(async () => {
    harness = await startHarness({
      module: "./test/fixtures/memo-handlers/index.ts",
      handlers: [unreachable],
      queue: { maxDeliveryCount: 2 },
    });
  });
  after(async () => {
    await harness?.stop();
  });

  it("a message the broker dead-letters (MaxDeliveryCountExceeded) is reported dead-lettered with that reason", async () => {
    const id = await harness.publish("Unreachable", "u-1", {});
    const outcome = await harness.outcome(id);
    assert.equal(outcome.status, "dead-lettered");
    assert.equal(outcome.status === "dead-lettered" && outcome.reason, "MaxDeliveryCountExceeded");
    // Each delivery the broker counted ended in an abandon; the worker may run attempts in place between them.
    assert.ok(calls >= 2, `the handler ran ${calls} times`);
    assert.equal(
      outcome.retries.filter((r) => r.how === "abandoned").length,
      2,
      JSON.stringify(outcome.retries),
    );
  });

  it("stop ends an outcome still awaited at once, with an error naming the message", async () => {
    const pending = assert.rejects(
      harness.outcome("never-sent-2", { timeoutMs: 50_000 }),
      /stopped before message never-sent-2 had an outcome/,
    );
    const began = Date.now();
    await harness.stop();
    await pending;
    assert.ok(Date.now() - began < 40_000);
    await assert.rejects(harness.outcome("later"), /stopped before message later/);
  });
});
