import assert from "node:assert/strict";
import { createAudit } from "../../src/cli/console-audit.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";

describe("console audit: each plan and run a JSON log line and a span (Application Insights' events)", function () {
  const telemetry = useTelemetryCapture();

  it("logs every event with the operator and the messages, and makes a span of a plan and of a run with its counts", function () {
    const lines: string[] = [];
    const audit = createAudit(createLogger({ write: (l) => lines.push(l) }));
    const base = { operator: "alice", action: "purge" as const, entity: "notes" };
    audit({
      event: "plan",
      ...base,
      count: 2,
      messages: [
        { sequenceNumber: "7", messageId: "m-7" },
        { sequenceNumber: "9", messageId: "m-9" },
      ],
    });
    audit({ event: "run", ...base, job: "j1", count: 2, archive: "/tmp/a.jsonl" });
    audit({ event: "result", ...base, job: "j1", sequenceNumber: "7", messageId: "m-7", result: "purged" });
    audit({
      event: "result",
      ...base,
      job: "j1",
      sequenceNumber: "9",
      messageId: "m-9",
      result: "held by another operator",
    });
    audit({
      event: "end",
      ...base,
      job: "j1",
      state: "partial",
      counts: { purged: 1, "held by another operator": 1 },
    });
    const logged = lines.map((l) => JSON.parse(l) as { msg: string; audit: Record<string, unknown> });
    assert.deepEqual(
      logged.map((l) => l.msg),
      ["console.plan", "console.run", "console.result", "console.result", "console.end"],
    );
    assert.ok(logged.every((l) => l.audit.operator === "alice"));
    assert.deepEqual(logged[3]!.audit.result, "held by another operator");
    const plan = telemetry().spansNamed("sbinbox.console plan purge")[0];
    assert.ok(plan, "a span for the plan");
    assert.deepEqual(plan.attributes["sbinbox.console.message_ids"], ["m-7", "m-9"]);
    const run = telemetry().spansNamed("sbinbox.console purge")[0];
    assert.ok(run, "a span for the run, ended at its end");
    assert.equal(run.attributes["sbinbox.console.operator"], "alice");
    assert.equal(run.attributes["sbinbox.console.state"], "partial");
    assert.equal(run.attributes["sbinbox.console.result.purged"], 1);
    assert.equal(run.attributes["sbinbox.console.result.held_by_another_operator"], 1);
  });
});
