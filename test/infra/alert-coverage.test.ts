import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { repoRoot } from "../../scripts/bicep.ts";
import { alertQueries } from "../../scripts/monitoring.ts";
import { Metric } from "../../src/telemetry/names.ts";
import { compileTemplate, isObject, obj, ofType, props, str, type JsonObject } from "./arm.ts";

/** GitHub's heading anchors: lowercase, spaces to hyphens, punctuation dropped. */
async function operationsAnchors(): Promise<Set<string>> {
  const text = await readFile(join(repoRoot, "docs/operations.md"), "utf8");
  return new Set(
    [...text.matchAll(/^#+ (.+)$/gm)].map((m) =>
      m[1]!
        .trim()
        .toLowerCase()
        .replace(/[^\w\- ]/g, "")
        .replace(/ /g, "-"),
    ),
  );
}

describe("alert coverage (bicep/modules/alerts/coverage.bicep): the failures on-call meets, each with a runbook section", function () {
  this.timeout(300_000);
  let main: JsonObject;
  let rules: { metric: JsonObject[]; log: JsonObject[] };

  before(async function () {
    main = await compileTemplate("infra/main.bicep");
    const coverage = ofType(main, "Microsoft.Insights/metricAlerts").find(
      (a) => isObject(a.template.variables) && a.template.variables.metricRules !== undefined,
    );
    assert.ok(coverage, "infra/main.bicep deploys the coverage module");
    const variables = obj(coverage.template.variables, "variables");
    rules = { metric: variables.metricRules as JsonObject[], log: variables.logRules as JsonObject[] };
  });

  it("watches server errors and the size quota on the queue, and Azure SQL's CPU, failed connections and storage", function () {
    assert.deepEqual(
      rules.metric.map((r) => [r.name, r.namespace, r.metric, r.aggregation, r.operator]),
      [
        [
          "service-bus-server-errors",
          "Microsoft.ServiceBus/namespaces",
          "ServerErrors",
          "Total",
          "GreaterThan",
        ],
        ["queue-near-quota", "Microsoft.ServiceBus/namespaces", "Size", "Maximum", "GreaterThan"],
        ["sql-cpu-high", "Microsoft.Sql/servers/databases", "cpu_percent", "Average", "GreaterThan"],
        [
          "sql-connections-failed",
          "Microsoft.Sql/servers/databases",
          "connection_failed",
          "Total",
          "GreaterThan",
        ],
        ["sql-storage-high", "Microsoft.Sql/servers/databases", "storage_percent", "Maximum", "GreaterThan"],
      ],
    );
    for (const r of rules.metric.slice(0, 2))
      assert.deepEqual(r.dimensions, "[variables('onQueue')]", `${str(r.name)} on the worker's queue only`);
    assert.match(str(rules.metric[1]!.threshold), /parameters\('queueMaxSizeMegabytes'\)/);
  });

  it("notifies each new window of dead letters (not auto-resolved), and reads only names the code emits", function () {
    const arrivals = rules.log.find((r) => r.name === "new-dead-letters")!;
    assert.equal(arrivals.autoMitigate, false, "a rate: each window with new dead letters notifies again");
    assert.equal(arrivals.window, "PT5M");
    assert.match(str(arrivals.query), /queries'\)\.deadLettered/);
    assert.ok(alertQueries().deadLettered, "the dead-letter query is the generated one");
    const kql = rules.log.map((r) => str(r.query)).join("\n");
    for (const name of [...kql.matchAll(/name == \\?"([^"\\]+)/g)].map((m) => m[1]!))
      assert.ok(Object.values(Metric).includes(name as never), `${name} is a metric names.ts defines`);
    assert.ok(kql.includes(Metric.settlementFailures) && kql.includes(Metric.ready));
    const silent = rules.log.find((r) => r.name === "no-telemetry")!;
    assert.deepEqual([silent.operator, silent.threshold], ["LessThan", 1]);
  });

  it("gives every rule a severity and a description linking its own section of docs/operations.md", async function () {
    const anchors = await operationsAnchors();
    const all = [...rules.metric, ...rules.log];
    assert.equal(all.length, 9);
    for (const r of all) {
      assert.ok(typeof r.severity === "number" && r.severity >= 0 && r.severity <= 4, str(r.name));
      const anchor = /\{\d+\}#([\w-]+)/.exec(str(r.description))?.[1];
      assert.equal(anchor, r.name, `${str(r.name)} links its section`);
      assert.ok(anchors.has(anchor ?? ""), `docs/operations.md has no heading #${anchor}`);
    }
    const logs = ofType(main, "Microsoft.Insights/scheduledQueryRules").filter(
      (a) => isObject(a.template.variables) && a.template.variables.metricRules !== undefined,
    );
    assert.equal(logs.length, 1);
    assert.match(str(props(logs[0]!).autoMitigate), /autoMitigate/);
  });
});
