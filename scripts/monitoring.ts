/**
 * The workbook and the log alerts' queries, built from the names the code emits (src/telemetry/names.ts), so a
 * renamed metric or attribute changes the generated files and test/infra/monitoring.test.ts fails until they are
 * regenerated: `node scripts/monitoring.ts` writes bicep/modules/workbook/workbook.json and
 * bicep/modules/alerts/queries.json, which the Bicep loads with loadTextContent/loadJsonContent.
 *
 * How the Azure Monitor exporter lands the telemetry in Application Insights: metrics in `customMetrics` (one row per
 * export interval and attribute set; a counter's `value` is the interval's delta, a histogram's `value` its sum with
 * `valueCount`/`valueMin`/`valueMax`, no buckets), CONSUMER spans (process) in `requests`, the others in
 * `dependencies`, attributes in `customDimensions`. A gauge's point is in `value` (its min and max are not sent). A request's `name` is not set for CONSUMER spans by the exporter,
 * so spans are picked by their `messaging.operation.name` attribute, never by name.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { format } from "prettier";
import { Attr, Metric } from "../src/telemetry/names.ts";

const repoRoot = join(fileURLToPath(import.meta.url), "..", "..");
export const workbookPath = "bicep/modules/workbook/workbook.json";
export const alertQueriesPath = "bicep/modules/alerts/queries.json";
/** Replaced by the Bicep with the namespace's resource ID (the metrics items chart Service Bus's own metrics). */
export const NAMESPACE_PLACEHOLDER = "__SERVICE_BUS_NAMESPACE_ID__";

/** A `customDimensions` value as text: every attribute read by a query goes through this (the test lists them). */
export const dim = (attribute: string): string => `tostring(customDimensions["${attribute}"])`;
const metric = (name: string): string => `customMetrics\n| where name == "${name}"`;
const processSpans = `requests\n| where ${dim(Attr.operationName)} == "process"`;

/** Workbook items: text, a time-range parameter, log queries on the component, Service Bus metrics. */
type Item = Record<string, unknown>;

function text(markdown: string): Item {
  return { type: 1, content: { json: markdown }, name: `text - ${markdown.slice(0, 24)}` };
}

function query(name: string, title: string, kql: string, visualization = "timechart"): Item {
  return {
    type: 3,
    content: {
      version: "KqlItem/1.0",
      query: kql,
      size: 0,
      title,
      timeContextFromParameter: "TimeRange",
      timeContext: { durationMs: 86_400_000 },
      queryType: 0,
      resourceType: "microsoft.insights/components",
      visualization,
    },
    customWidth: "50",
    name,
  };
}

function serviceBusMetrics(name: string, title: string, metricName: string): Item {
  return {
    type: 10,
    content: {
      chartId: `workbook-${name}`,
      version: "MetricsItem/2.0",
      size: 0,
      chartType: 2,
      resourceType: "microsoft.servicebus/namespaces",
      metricScope: 0,
      resourceIds: [NAMESPACE_PLACEHOLDER],
      timeContextFromParameter: "TimeRange",
      timeContext: { durationMs: 86_400_000 },
      metrics: [
        {
          namespace: "microsoft.servicebus/namespaces",
          metric: `microsoft.servicebus/namespaces--${metricName}`,
          // Average: these are counts sampled per minute; a sum over the bin would multiply them.
          aggregation: 4,
          // A string: the workbook schema's MetricsItem takes one dimension name here.
          splitBy: "EntityName",
        },
      ],
      title,
      gridSettings: { rowLimit: 10000 },
    },
    customWidth: "50",
    name,
  };
}

/** The workbook's log queries by item name (the test checks every name and attribute they read). */
export const workbookQueries: Record<string, { title: string; kql: string; visualization?: string }> = {
  outcomes: {
    title: "Messages per outcome, per minute",
    kql: `${metric(Metric.outcomes)}\n| summarize messages = sum(value) by outcome = ${dim(Attr.outcome)}, bin(timestamp, 1m)`,
  },
  duplicates: {
    title: "Duplicates the inbox absorbed",
    kql: `${metric(Metric.duplicatesAbsorbed)}\n| summarize duplicates = sum(value) by bin(timestamp, 5m)`,
  },
  retries: {
    title: "Retries: waited in place, scheduled as a copy, exhausted",
    kql: `${metric(Metric.retries)}\n| summarize retries = sum(value) by retry = ${dim(Attr.retryOutcome)}, bin(timestamp, 5m)`,
  },
  deadLetters: {
    title: "Dead-lettered by reason",
    // itemCount: each sampled-in request stands for that many.
    kql: `${processSpans}\n| where ${dim(Attr.dispositionStatus)} == "dead_letter"\n| summarize messages = sum(itemCount) by reason = ${dim(Attr.deadLetterReason)}, bin(timestamp, 5m)`,
    visualization: "barchart",
  },
  outagePauses: {
    title: "Outage pauses: how many, the longest (s)",
    kql: `${metric(Metric.outagePause)}\n| summarize pauses = sum(valueCount), longestSeconds = max(valueMax) by bin(timestamp, 5m)`,
  },
  batches: {
    title: "Group-commit batches by outcome",
    kql: `${metric(Metric.batchSize)}\n| summarize batches = sum(valueCount) by outcome = ${dim(Attr.batchResult)}, bin(timestamp, 5m)`,
  },
  duration: {
    title: "Processing time per message, percentiles (ms)",
    kql: `${processSpans}\n| summarize p50 = percentile(duration, 50), p95 = percentile(duration, 95), p99 = percentile(duration, 99) by bin(timestamp, 5m)`,
  },
  settlementFailures: {
    title: "Settlements that failed (the broker redelivers)",
    kql: `${metric(Metric.settlementFailures)}\n| summarize failures = sum(value) by error = ${dim(Attr.errorType)}, bin(timestamp, 5m)`,
  },
  openClaims: {
    title: "Open two-phase claims",
    kql: `${metric(Metric.openClaims)}\n| summarize claims = max(value) by bin(timestamp, 5m)`,
  },
  readiness: {
    title: "Instances ready (/readyz 200) and not",
    kql: `${metric(Metric.ready)}\n| summarize ready = dcountif(cloud_RoleInstance, value >= 1), notReady = dcountif(cloud_RoleInstance, value < 1) by bin(timestamp, 5m)`,
  },
  outboxLag: {
    title: "Outbox relay: lag of the oldest unsent row (s)",
    kql: `${metric(Metric.outboxLag)}\n| summarize lagSeconds = max(value) by destination = ${dim(Attr.destinationName)}, bin(timestamp, 5m)`,
  },
  outboxStale: {
    title: "Outbox relay: stale rows (an operator decides)",
    kql: `${metric(Metric.outboxStale)}\n| summarize staleRows = max(value) by destination = ${dim(Attr.destinationName)}, bin(timestamp, 5m)`,
  },
};

export function workbook(): Record<string, unknown> {
  const q = (name: string): Item => {
    const entry = workbookQueries[name]!;
    return query(name, entry.title, entry.kql, entry.visualization);
  };
  return {
    version: "Notebook/1.0",
    items: [
      text(
        "# sbinbox\nWhat the worker did with each message, where it waited, and what is left for an operator. " +
          "What each chart means and what to do: docs/operations.md.",
      ),
      {
        type: 9,
        content: {
          version: "KqlParameterItem/1.0",
          parameters: [
            {
              id: "time-range",
              version: "KqlParameterItem/1.0",
              name: "TimeRange",
              label: "Time range",
              type: 4,
              isRequired: true,
              value: { durationMs: 86_400_000 },
              typeSettings: {
                selectableValues: [
                  { durationMs: 3_600_000 },
                  { durationMs: 14_400_000 },
                  { durationMs: 86_400_000 },
                  { durationMs: 604_800_000 },
                ],
              },
            },
          ],
        },
        name: "parameters",
      },
      text("## Messages"),
      q("outcomes"),
      q("duplicates"),
      q("retries"),
      q("deadLetters"),
      q("duration"),
      q("settlementFailures"),
      text("## The queue (Service Bus's own metrics)"),
      serviceBusMetrics("activeMessages", "Queue depth (ActiveMessages)", "ActiveMessages"),
      serviceBusMetrics(
        "deadLetteredMessages",
        "Dead-letter count (DeadletteredMessages)",
        "DeadletteredMessages",
      ),
      text("## The database"),
      q("outagePauses"),
      q("batches"),
      q("openClaims"),
      q("readiness"),
      text("## The outbox relay"),
      q("outboxLag"),
      q("outboxStale"),
    ],
    $schema: "https://github.com/Microsoft/Application-Insights-Workbooks/blob/master/schema/workbook.json",
  };
}

/**
 * The log alerts' queries. Each returns rows only while the condition holds (the rule fires on a row count above 0,
 * or on the measure column named in the Bicep); the window is the rule's own (windowSize).
 */
export function alertQueries(): Record<string, string> {
  return {
    deadLettered: `${processSpans}\n| where ${dim(Attr.dispositionStatus)} == "dead_letter"\n| summarize deadLettered = sum(itemCount) by reason = ${dim(Attr.deadLetterReason)}`,
    outagePause: `${metric(Metric.outagePause)}\n| summarize longestSeconds = max(valueMax)`,
    // An instance counts as ready when any point of the window said so; the rule fires when none did.
    notReady: `${metric(Metric.ready)}\n| summarize ready = max(value) by cloud_RoleName, cloud_RoleInstance\n| summarize instances = count(), readyInstances = countif(ready >= 1) by cloud_RoleName\n| where instances > 0 and readyInstances == 0`,
    // The silence gauge's state word turns silent when readiness does (the link heard nothing past its bound).
    serviceBusSilent: `${metric(Metric.serviceBusSilence)}\n| where ${dim(Attr.serviceBusState)} == "silent"\n| summarize silentSeconds = max(value) by cloud_RoleInstance`,
    retriesExhausted: `${metric(Metric.retries)}\n| where ${dim(Attr.retryOutcome)} == "exhausted"\n| summarize exhausted = sum(value)`,
    outboxStale: `${metric(Metric.outboxStale)}\n| summarize staleRows = max(value) by destination = ${dim(Attr.destinationName)}`,
  };
}

async function json(value: unknown): Promise<string> {
  return format(JSON.stringify(value), { parser: "json", printWidth: 110 });
}

/** The generated files' text, by path relative to the repository root. */
export async function generated(): Promise<Record<string, string>> {
  return {
    [workbookPath]: await json(workbook()),
    [alertQueriesPath]: await json(alertQueries()),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const [path, content] of Object.entries(await generated())) {
    await writeFile(join(repoRoot, path), content);
    process.stdout.write(`wrote ${path}\n`);
  }
}
