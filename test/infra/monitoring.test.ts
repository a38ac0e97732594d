import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { repoRoot } from "../../scripts/bicep.ts";
import {
  NAMESPACE_PLACEHOLDER,
  alertQueries,
  dim,
  generated,
  workbookQueries,
} from "../../scripts/monitoring.ts";
import { workerMetrics } from "../../src/telemetry/metrics.ts";
import { Attr, Metric } from "../../src/telemetry/names.ts";
import { relayMetrics } from "../../src/telemetry/outbox-metrics.ts";
import { progressMetrics } from "../../src/telemetry/progress-metrics.ts";
import { startupMetrics } from "../../src/telemetry/startup-metrics.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";
import {
  compileTemplate,
  isObject,
  obj,
  ofType,
  parameterDefault,
  props,
  single,
  str,
  type JsonObject,
} from "./arm.ts";

const allQueries = (): string[] => [
  ...Object.values(workbookQueries).map((q) => q.kql),
  ...Object.values(alertQueries()),
];
const metricNames = (kql: string): string[] =>
  [...kql.matchAll(/\bname == "([^"]+)"|\bName == "([^"]+)"/g)].map((m) => (m[1] ?? m[2])!);
const attributeNames = (kql: string): string[] =>
  [...kql.matchAll(/customDimensions\["([^"]+)"\]/g)].map((m) => m[1]!);

/**
 * The alerts module's own rules: bicep/modules/alerts/coverage.bicep's are checked by alert-coverage.test.ts (its
 * template is the one with `metricRules`).
 */
const alertsOf = (main: JsonObject, type: string) =>
  ofType(main, type).filter(
    (a) => !isObject(a.template.variables) || a.template.variables.metricRules === undefined,
  );

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

describe("monitoring: the workbook's and the alerts' queries read the names the code emits", function () {
  const capture = useTelemetryCapture();

  it("the committed workbook.json and queries.json are what scripts/monitoring.ts generates from names.ts", async function () {
    for (const [path, content] of Object.entries(await generated())) {
      const committed = await readFile(join(repoRoot, path), "utf8");
      assert.equal(committed, content, `${path} is stale: run node scripts/monitoring.ts`);
    }
  });

  it("every metric and attribute a query reads is one names.ts defines", function () {
    const metrics = new Set<string>(Object.values(Metric));
    const attributes = new Set<string>(Object.values(Attr));
    for (const kql of allQueries()) {
      for (const name of metricNames(kql)) assert.ok(metrics.has(name), `${name} is no metric of names.ts`);
      for (const name of attributeNames(kql))
        assert.ok(attributes.has(name), `${name} is no attribute of names.ts`);
    }
  });

  it("the metrics the queries read are the ones the instruments export, with the attributes read", async function () {
    const worker = workerMetrics();
    worker.recordProcessed({ queue: "q", outcome: "duplicate", durationMs: 3 });
    worker.recordRetry("q", "exhausted", "transient");
    worker.recordOutagePause(12_000);
    worker.recordBatch(4, "committed");
    worker.recordSettlement({ queue: "q", disposition: "complete", errorType: "MessageLockLost" });
    const stopClaims = worker.observeOpenClaims(() => 2);
    const stopRelay = relayMetrics.observeStatus("q", () => ({ lagMs: 5_000, stale: 1 }));
    const stopReady = startupMetrics.observeReadiness(() => Promise.resolve(false));
    const stopSilence = progressMetrics.observe("q", () => ({ silenceMs: 31_000, state: "silent" }));
    let exported;
    try {
      exported = await capture().collect();
    } finally {
      stopClaims();
      stopRelay();
      stopReady();
      stopSilence();
    }
    const byName = new Map(exported.map((m) => [m.descriptor.name, m]));
    for (const kql of allQueries()) {
      const read = attributeNames(kql);
      for (const name of metricNames(kql)) {
        const data = byName.get(name);
        assert.ok(data, `a query reads ${name}, which no instrument exported`);
        const keys = new Set(data.dataPoints.flatMap((p) => Object.keys(p.attributes)));
        for (const attribute of read.filter((a) => a !== Attr.operationName && a !== Attr.dispositionStatus))
          assert.ok(keys.has(attribute), `${name} has no ${attribute} (exported: ${[...keys].join(", ")})`);
      }
    }
    const ready = byName.get(Metric.ready)!.dataPoints[0]!.value;
    assert.equal(ready, 0, "a process that is not ready reports 0");
  });
});

describe("monitoring: the workbook and the alert rules in infra/main.bicep, compiled by the pinned Bicep CLI", function () {
  this.timeout(120_000);
  let main: JsonObject;

  before(async function () {
    main = await compileTemplate("infra/main.bicep");
  });

  it("deploys the workbook on the Application Insights component, with every query and Service Bus's metrics", function () {
    const workbook = single(main, "Microsoft.Insights/workbooks");
    const p = props(workbook);
    assert.equal(workbook.raw.kind, "shared");
    assert.match(
      str(p.sourceId),
      /resourceId\('Microsoft\.Insights\/components', parameters\('applicationInsightsName'\)\)/,
    );
    assert.equal(p.serializedData, "[variables('content')]");
    const variables = obj(workbook.template.variables, "variables");
    assert.match(
      str(variables.content),
      /replace\(variables\('\$fxv#0'\), '__SERVICE_BUS_NAMESPACE_ID__', parameters\('namespaceResourceId'\)\)/,
      "the namespace's ID is put in at deployment",
    );
    const content = JSON.parse(str(variables["$fxv#0"], "the loaded workbook.json")) as {
      items: { content: Record<string, unknown> }[];
    };
    const kqls = content.items.map((i) => i.content.query).filter((q) => typeof q === "string");
    for (const q of Object.values(workbookQueries)) assert.ok(kqls.includes(q.kql), q.title);
    const charted = content.items.flatMap((i) =>
      ((i.content.metrics as { metric: string; splitBy: unknown }[] | undefined) ?? []).map((m) => {
        assert.equal(typeof m.splitBy, "string", "the workbook schema's splitBy is a dimension name");
        return `${m.metric} by ${String(m.splitBy)}`;
      }),
    );
    assert.deepEqual(charted, [
      "microsoft.servicebus/namespaces--ActiveMessages by EntityName",
      "microsoft.servicebus/namespaces--DeadletteredMessages by EntityName",
    ]);
    assert.ok(JSON.stringify(content).includes(NAMESPACE_PLACEHOLDER));
  });

  it("has each alert with a severity, a description saying what to do and a link to a heading of docs/operations.md", async function () {
    const anchors = await operationsAnchors();
    const metricAlerts = alertsOf(main, "Microsoft.Insights/metricAlerts");
    assert.equal(alertsOf(main, "Microsoft.Insights/scheduledQueryRules").length, 1);
    const logAlerts = alertsOf(main, "Microsoft.Insights/scheduledQueryRules")[0]!;
    assert.equal(metricAlerts.length, 4);
    const copy = obj(logAlerts.raw.copy, "the log rules' copy loop");
    const rules = obj(logAlerts.template.variables, "variables").logRules as JsonObject[];
    assert.equal(copy.count, "[length(variables('logRules'))]");
    const descriptions = [
      ...metricAlerts.map((a) => ({ severity: props(a).severity, text: str(props(a).description) })),
      ...rules.map((r) => ({ severity: r.severity, text: str(r.description) })),
    ];
    assert.equal(descriptions.length, 10);
    const linked: string[] = [];
    for (const { severity, text } of descriptions) {
      assert.ok(typeof severity === "number" && severity >= 0 && severity <= 4, text);
      // format('... {0}#anchor', parameters('runbookUrl')): the URL of docs/operations.md, then the section.
      const anchor = /\{\d\}#([\w-]+)/.exec(text)?.[1];
      assert.ok(anchor, `no link to docs/operations.md in: ${text}`);
      assert.ok(anchors.has(anchor), `docs/operations.md has no heading #${anchor}`);
      linked.push(anchor);
    }
    assert.equal(new Set(linked).size, 10, "each alert has its own section");
    assert.match(str(parameterDefault(logAlerts.template, "runbookUrl")), /(^|\/)docs\/operations\.md$/);
    assert.deepEqual(
      rules.map((r) => r.key),
      Object.keys(alertQueries()),
      "a rule for every generated query",
    );
  });

  it("watches the queue not drained as a metric alert: ActiveMessages minimum > 0 and CompleteMessage total < 1 on the queue", function () {
    const idle = alertsOf(main, "Microsoft.Insights/metricAlerts").find((a) =>
      str(a.raw.name).includes("queue-not-drained"),
    );
    assert.ok(idle, "a metric alert named queue-not-drained");
    const p = props(idle);
    const criteria = obj(p.criteria, "criteria");
    assert.equal(criteria["odata.type"], "Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria");
    assert.deepEqual(p.scopes, ["[parameters('namespaceResourceId')]"]);
    const allOf = criteria.allOf as JsonObject[];
    assert.deepEqual(
      allOf.map((c) => [c.metricName, c.timeAggregation, c.operator, c.threshold]),
      [
        ["ActiveMessages", "Minimum", "GreaterThan", 0],
        ["CompleteMessage", "Total", "LessThan", 1],
      ],
    );
    for (const c of allOf)
      assert.deepEqual(c.dimensions, [
        { name: "EntityName", operator: "Include", values: ["[parameters('entityName')]"] },
      ]);
    assert.match(
      str(p.windowSize),
      /variables\('idleWindows'\)\[string\(parameters\('idleAlertMinutes'\)\)\]/,
    );
  });

  it("watches the namespace's ThrottledRequests: more than throttledAlertThreshold (100) in 15 minutes, no entity dimension", function () {
    const throttled = alertsOf(main, "Microsoft.Insights/metricAlerts").find((a) =>
      str(a.raw.name).includes("throttled-requests"),
    );
    assert.ok(throttled, "a metric alert named throttled-requests");
    const p = props(throttled);
    assert.deepEqual(p.scopes, ["[parameters('namespaceResourceId')]"]);
    assert.equal(p.windowSize, "PT15M");
    const [criterion, ...others] = obj(p.criteria, "criteria").allOf as JsonObject[];
    assert.equal(others.length, 0);
    assert.deepEqual(
      [criterion!.metricNamespace, criterion!.metricName, criterion!.timeAggregation, criterion!.operator],
      ["Microsoft.ServiceBus/namespaces", "ThrottledRequests", "Total", "GreaterThan"],
    );
    assert.equal(criterion!.threshold, "[parameters('throttledAlertThreshold')]");
    assert.equal(criterion!.dimensions, undefined, "throttling is the namespace's, not one entity's");
    assert.equal(parameterDefault(throttled.template, "throttledAlertThreshold"), 100);
    assert.match(str(p.description), /Premium or add messaging units/);
  });

  it("watches dead-letters on the queue's EntityName, health checks on the web app, and notifies an optional group", function () {
    const [deadLetters, health] = alertsOf(main, "Microsoft.Insights/metricAlerts");
    const criterion = (alert: typeof deadLetters) =>
      (obj(props(alert!).criteria, "criteria").allOf as JsonObject[])[0]!;
    const dl = criterion(deadLetters);
    assert.equal(dl.metricName, "DeadletteredMessages");
    assert.equal((dl.dimensions as JsonObject[])[0]!.name, "EntityName");
    assert.equal(dl.operator, "GreaterThan");
    assert.equal(dl.threshold, 0);
    const hc = criterion(health);
    assert.equal(hc.metricName, "HealthCheckStatus");
    // The best instance below 1: every instance failing, not one of several.
    assert.deepEqual([hc.timeAggregation, hc.operator, hc.threshold], ["Maximum", "LessThan", 1]);
    const rules = obj(
      alertsOf(main, "Microsoft.Insights/scheduledQueryRules")[0]!.template.variables,
      "variables",
    ).logRules as JsonObject[];
    assert.ok(
      !rules.some((r) => r.key === "idle"),
      "no log rule reads ActiveMessages, which is not exported to logs",
    );
    const silent = alertQueries().serviceBusSilent!;
    assert.ok(silent.includes(`name == "${Metric.serviceBusSilence}"`), silent);
    assert.ok(silent.includes(`${dim(Attr.serviceBusState)} == "silent"`), silent);
    const group = single(main, "Microsoft.Insights/actionGroups");
    assert.match(str(group.raw.condition), /variables\('createGroup'\)/);
    const createGroup = str(obj(group.template.variables, "variables").createGroup);
    assert.match(createGroup, /empty\(parameters\('existingActionGroupId'\)\)/);
    assert.match(createGroup, /not\(empty\(parameters\('alertEmail'\)\)\)/);
  });
});
