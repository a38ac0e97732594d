import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer as createHttpServer, type IncomingMessage, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { gunzipSync } from "node:zlib";
import { trace } from "@opentelemetry/api";
import { ConfigError } from "../../src/domain/errors.ts";
import { createSampler, planTelemetry, startTelemetry } from "../../src/telemetry/setup.ts";

const root = resolve(import.meta.dirname, "../..");

// What a program started by bin/sbinbox.js does: start telemetry, make a span and a count, shut down.
const CHILD = `
import { startProcessTelemetry, shutdownProcessTelemetry } from "./src/telemetry/register.ts";
if (!(await startProcessTelemetry())) process.exit(2);
const { trace, metrics } = await import("@opentelemetry/api");
const span = trace.getTracer("sbinbox").startSpan("complete orders", {
  attributes: { "messaging.servicebus.disposition_status": "complete" },
});
span.end();
metrics.getMeter("sbinbox").createCounter("sbinbox.test.count").add(3);
const flushed = await shutdownProcessTelemetry();
process.stdout.write("child done\\n");
if (!flushed) process.exit();
`;

interface ChildResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

// Many root spans (each its own trace id), for what a sampler keeps of them.
const MANY_SPANS_CHILD = `
import { startProcessTelemetry, shutdownProcessTelemetry } from "./src/telemetry/register.ts";
if (!(await startProcessTelemetry())) process.exit(2);
const { trace } = await import("@opentelemetry/api");
for (let i = 0; i < 400; i++) trace.getTracer("sbinbox").startSpan("complete orders").end();
if (!(await shutdownProcessTelemetry())) process.exit();
`;

/** Runs CHILD with only the given telemetry settings (none inherited from the test's own environment). */
function runChild(env: Record<string, string>, script = CHILD): Promise<ChildResult> {
  const base = Object.fromEntries(
    Object.entries(process.env).filter(
      ([key]) => !key.startsWith("OTEL_") && !key.startsWith("APPLICATIONINSIGHTS_"),
    ),
  );
  return new Promise((resolvePromise) => {
    execFile(
      process.execPath,
      ["--input-type=module", "-e", script],
      { cwd: root, env: { ...base, ...env }, timeout: 30_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : null) : 0;
        resolvePromise({ code, stdout, stderr });
      },
    );
  });
}

interface Received {
  url: string;
  contentType: string;
  body: Buffer;
}

function collect(server: Server): Received[] {
  const received: Received[] = [];
  server.on("request", (req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      let body = Buffer.concat(chunks);
      if (req.headers["content-encoding"] === "gzip") body = gunzipSync(body);
      received.push({ url: req.url ?? "", contentType: req.headers["content-type"] ?? "", body });
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ itemsReceived: 1, itemsAccepted: 1, errors: [] }));
    });
  });
  return received;
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((ready) => server.listen(0, "127.0.0.1", ready));
  return (server.address() as AddressInfo).port;
}

const azure = {
  APPLICATIONINSIGHTS_CONNECTION_STRING: "InstrumentationKey=00000000-0000-0000-0000-000000000001",
};

describe("telemetry set-up", () => {
  describe("planTelemetry", () => {
    it("exports nothing when nothing is configured", () => {
      const plan = planTelemetry({});
      assert.deepEqual(plan.traces, []);
      assert.deepEqual(plan.metrics, []);
    });

    it("takes the exporters OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER name", () => {
      const plan = planTelemetry({ OTEL_TRACES_EXPORTER: "console, otlp", OTEL_METRICS_EXPORTER: "otlp" });
      assert.deepEqual(plan.traces, ["console", "otlp"]);
      assert.deepEqual(plan.metrics, ["otlp"]);
    });

    it("turns OTLP on for the signals whose endpoint is set", () => {
      assert.deepEqual(planTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }).metrics, [
        "otlp",
      ]);
      const traces = planTelemetry({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://collector:4318/v1/traces" });
      assert.deepEqual([traces.traces, traces.metrics], [["otlp"], []]);
      assert.deepEqual(
        planTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c", OTEL_TRACES_EXPORTER: "none" }).traces,
        [],
      );
    });

    it("adds Azure Monitor for an Application Insights connection string, with Entra ID when asked", () => {
      const connectionString =
        "InstrumentationKey=00000000-0000-0000-0000-000000000001;IngestionEndpoint=https://x/";
      const plain = planTelemetry({ APPLICATIONINSIGHTS_CONNECTION_STRING: connectionString });
      assert.deepEqual([plain.traces, plain.metrics], [["azuremonitor"], ["azuremonitor"]]);
      assert.equal(plain.azureMonitor?.entraId, undefined);
      const entra = planTelemetry({
        APPLICATIONINSIGHTS_CONNECTION_STRING: connectionString,
        APPLICATIONINSIGHTS_AUTHENTICATION_STRING: "Authorization=AAD;ClientId=abc",
      });
      assert.deepEqual(entra.azureMonitor?.entraId, { managedIdentityClientId: "abc" });
    });

    it("takes the sampler OTEL_TRACES_SAMPLER names, with its OTEL_TRACES_SAMPLER_ARG", () => {
      const plan = (env: Record<string, string>) => planTelemetry(env).sampler;
      assert.equal(plan({}), undefined);
      assert.deepEqual(
        plan({ OTEL_TRACES_SAMPLER: "parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.1" }),
        {
          name: "parentbased_traceidratio",
          arg: 0.1,
        },
      );
      // The specification's default ratio is 1.
      assert.deepEqual(plan({ OTEL_TRACES_SAMPLER: "TraceIdRatio" }), { name: "traceidratio" });
      assert.deepEqual(
        plan({ ...azure, OTEL_TRACES_SAMPLER: "microsoft.rate_limited", OTEL_TRACES_SAMPLER_ARG: "5" }),
        { name: "microsoft.rate_limited", arg: 5 },
      );
    });

    it("builds Azure Monitor's samplers from the exporter package for microsoft.* names", async () => {
      const { ApplicationInsightsSampler, RateLimitedSampler } =
        await import("@azure/monitor-opentelemetry-exporter");
      const { ParentBasedSampler } = await import("@opentelemetry/sdk-trace");
      assert.ok(
        (await createSampler({ name: "microsoft.fixed_percentage", arg: 0.1 })) instanceof
          ApplicationInsightsSampler,
      );
      assert.ok(
        (await createSampler({ name: "microsoft.rate_limited", arg: 5 })) instanceof RateLimitedSampler,
      );
      assert.ok((await createSampler(undefined)) instanceof ParentBasedSampler);
    });

    it("takes the batch span processor's OTEL_BSP_* and OTEL_METRIC_EXPORT_TIMEOUT, with the specification's defaults", () => {
      const defaults = planTelemetry({});
      assert.deepEqual(defaults.batchSpans, {
        scheduledDelayMillis: 5000,
        exportTimeoutMillis: 30_000,
        maxQueueSize: 2048,
        maxExportBatchSize: 512,
      });
      assert.deepEqual([defaults.metricExportIntervalMs, defaults.metricExportTimeoutMs], [60_000, 30_000]);
      const set = planTelemetry({
        OTEL_BSP_SCHEDULE_DELAY: "250",
        OTEL_BSP_EXPORT_TIMEOUT: "1000",
        OTEL_BSP_MAX_QUEUE_SIZE: "8192",
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "1024",
        OTEL_METRIC_EXPORT_INTERVAL: "15000",
        OTEL_METRIC_EXPORT_TIMEOUT: "5000",
      });
      assert.deepEqual(set.batchSpans, {
        scheduledDelayMillis: 250,
        exportTimeoutMillis: 1000,
        maxQueueSize: 8192,
        maxExportBatchSize: 1024,
      });
      assert.deepEqual([set.metricExportIntervalMs, set.metricExportTimeoutMs], [15_000, 5000]);
      // A default longer than a set limit is cut to it, as the SDK does.
      assert.equal(planTelemetry({ OTEL_BSP_MAX_QUEUE_SIZE: "100" }).batchSpans.maxExportBatchSize, 100);
      assert.equal(planTelemetry({ OTEL_METRIC_EXPORT_INTERVAL: "10000" }).metricExportTimeoutMs, 10_000);
    });

    it("turns everything off with OTEL_SDK_DISABLED", () => {
      const plan = planTelemetry({ OTEL_SDK_DISABLED: "true", OTEL_TRACES_EXPORTER: "console" });
      assert.deepEqual([plan.traces, plan.metrics], [[], []]);
    });

    it("rejects a wrong setting with an error naming it", () => {
      const cases: [Record<string, string>, string][] = [
        [{ OTEL_TRACES_EXPORTER: "jaeger" }, "OTEL_TRACES_EXPORTER"],
        [{ OTEL_METRICS_EXPORTER: "none,otlp" }, "OTEL_METRICS_EXPORTER"],
        [{ OTEL_EXPORTER_OTLP_PROTOCOL: "thrift" }, "OTEL_EXPORTER_OTLP_PROTOCOL"],
        [{ OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "udp" }, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"],
        [{ OTEL_METRIC_EXPORT_INTERVAL: "soon" }, "OTEL_METRIC_EXPORT_INTERVAL"],
        [{ OTEL_METRIC_EXPORT_TIMEOUT: "0" }, "OTEL_METRIC_EXPORT_TIMEOUT"],
        [
          { OTEL_METRIC_EXPORT_INTERVAL: "10000", OTEL_METRIC_EXPORT_TIMEOUT: "20000" },
          "OTEL_METRIC_EXPORT_TIMEOUT",
        ],
        [{ OTEL_BSP_SCHEDULE_DELAY: "5s" }, "OTEL_BSP_SCHEDULE_DELAY"],
        [{ OTEL_BSP_EXPORT_TIMEOUT: "-1" }, "OTEL_BSP_EXPORT_TIMEOUT"],
        [{ OTEL_BSP_MAX_QUEUE_SIZE: "2048.5" }, "OTEL_BSP_MAX_QUEUE_SIZE"],
        [{ OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "many" }, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"],
        [
          { OTEL_BSP_MAX_QUEUE_SIZE: "100", OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "200" },
          "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        ],
        [{ OTEL_TRACES_SAMPLER: "parentbased_traceidratoi" }, "OTEL_TRACES_SAMPLER"],
        [{ OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "10%" }, "OTEL_TRACES_SAMPLER_ARG"],
        [{ OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "1.5" }, "OTEL_TRACES_SAMPLER_ARG"],
        // Azure Monitor's samplers only where Application Insights counts what their spans stand for.
        [
          { OTEL_TRACES_SAMPLER: "microsoft.fixed_percentage", OTEL_TRACES_SAMPLER_ARG: "0.1" },
          "OTEL_TRACES_SAMPLER",
        ],
        [{ ...azure, OTEL_TRACES_SAMPLER: "microsoft.rate_limited" }, "OTEL_TRACES_SAMPLER_ARG"],
        [
          { ...azure, OTEL_TRACES_SAMPLER: "microsoft.rate_limited", OTEL_TRACES_SAMPLER_ARG: "-1" },
          "OTEL_TRACES_SAMPLER_ARG",
        ],
        [
          { APPLICATIONINSIGHTS_CONNECTION_STRING: "IngestionEndpoint=https://x/" },
          "APPLICATIONINSIGHTS_CONNECTION_STRING",
        ],
      ];
      for (const [env, setting] of cases) {
        assert.throws(
          () => planTelemetry(env),
          (error: unknown) => error instanceof ConfigError && error.setting === setting,
          setting,
        );
      }
    });
  });

  describe("startTelemetry", () => {
    it("with nothing configured starts no SDK, so spans are not even recorded", async () => {
      const telemetry = await startTelemetry({ env: {} });
      assert.equal(telemetry.active, false);
      const span = trace.getTracer("sbinbox").startSpan("nothing");
      assert.equal(span.isRecording(), false);
      span.end();
      await telemetry.shutdown();
    });

    it("with nothing configured, a program runs, prints no telemetry and exits 0", async () => {
      const child = await runChild({});
      assert.equal(child.code, 0, child.stderr);
      assert.equal(child.stdout, "child done\n");
      assert.equal(child.stderr, "");
    });

    it("with OTEL_TRACES_EXPORTER=console, prints each span with its attributes", async () => {
      const child = await runChild({ OTEL_TRACES_EXPORTER: "console" });
      assert.equal(child.code, 0, child.stderr);
      assert.match(child.stdout, /name: 'complete orders'/);
      assert.match(child.stdout, /'messaging\.servicebus\.disposition_status': 'complete'/);
      assert.match(child.stdout, /'service\.name': 'sbinbox'/);
    });

    it("samples by OTEL_TRACES_SAMPLER: traceidratio 0 prints no span, and a misspelt sampler exits 2 naming it", async () => {
      const off = await runChild({
        OTEL_TRACES_EXPORTER: "console",
        OTEL_TRACES_SAMPLER: "traceidratio",
        OTEL_TRACES_SAMPLER_ARG: "0",
      });
      assert.equal(off.code, 0, off.stderr);
      assert.match(off.stdout, /child done/);
      assert.doesNotMatch(off.stdout, /complete orders/);
      const typo = await runChild({
        OTEL_TRACES_EXPORTER: "console",
        OTEL_TRACES_SAMPLER: "parentbased_traceidratoi",
      });
      assert.equal(typo.code, 2);
      assert.match(typo.stderr, /OTEL_TRACES_SAMPLER/);
    });

    it("keeps OTEL_SERVICE_NAME over the default service name", async () => {
      const child = await runChild({ OTEL_TRACES_EXPORTER: "console", OTEL_SERVICE_NAME: "orders-worker" });
      assert.match(child.stdout, /'service\.name': 'orders-worker'/);
    });

    // What NodeSDK registered, now built from its parts (providers.ts): the context manager (a child span of the
    // active one), the W3C propagators, the default resource detectors, and the same settings read.
    it("registers the context manager, W3C propagation and the detected resource as NodeSDK did", async () => {
      const child = await runChild(
        { OTEL_TRACES_EXPORTER: "console", OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=test" },
        `
import { startProcessTelemetry, shutdownProcessTelemetry } from "./src/telemetry/register.ts";
if (!(await startProcessTelemetry())) process.exit(2);
const { context, propagation, trace } = await import("@opentelemetry/api");
const tracer = trace.getTracer("sbinbox");
const parent = tracer.startSpan("parent");
const carrier = {};
await context.with(trace.setSpan(context.active(), parent), async () => {
  await new Promise((r) => setTimeout(r, 1));
  tracer.startSpan("child").end();
  propagation.inject(context.active(), carrier);
});
parent.end();
process.stdout.write("carrier " + JSON.stringify(carrier) + " parent " + parent.spanContext().spanId + "\\n");
if (!(await shutdownProcessTelemetry())) process.exit();
`,
      );
      assert.equal(child.code, 0, child.stderr);
      const parentId = /parent ([0-9a-f]{16})/.exec(child.stdout)?.[1];
      assert.ok(parentId, child.stdout);
      assert.match(child.stdout, new RegExp(`"traceparent":"00-[0-9a-f]{32}-${parentId}-01"`));
      assert.match(child.stdout, new RegExp(`parentSpanContext: \\{[^}]*spanId: '${parentId}'`));
      assert.match(child.stdout, /'host\.name':/);
      assert.match(child.stdout, /'process\.pid': \d+/);
      assert.match(child.stdout, /'service\.instance\.id':/);
      assert.match(child.stdout, /'deployment\.environment\.name': 'test'/);
      for (const [setting, value] of [
        ["OTEL_PROPAGATORS", "b3"],
        ["OTEL_NODE_RESOURCE_DETECTORS", "gcp"],
      ] as const) {
        const refused = await runChild({ OTEL_TRACES_EXPORTER: "console", [setting]: value });
        assert.equal(refused.code, 2, refused.stdout);
        assert.match(refused.stderr, new RegExp(`${setting}: unknown .*"${value}"`));
      }
    });

    // Azure Monitor's cloud_RoleInstance comes from service.instance.id: a detector must not overwrite what the
    // operator set, so the env detector runs last, as in NodeSDK.
    it("keeps service.instance.id and host.name from OTEL_RESOURCE_ATTRIBUTES over the detected ones", async () => {
      const child = await runChild({
        OTEL_TRACES_EXPORTER: "console",
        OTEL_RESOURCE_ATTRIBUTES:
          "service.instance.id=worker-7,host.name=appsvc-1,process.runtime.name=custom",
      });
      assert.equal(child.code, 0, child.stderr);
      assert.match(child.stdout, /'service\.instance\.id': 'worker-7'/);
      assert.match(child.stdout, /'host\.name': 'appsvc-1'/);
      assert.match(child.stdout, /'process\.runtime\.name': 'custom'/);
      // The other detected attributes are still there.
      assert.match(child.stdout, /'process\.pid': \d+/);
      assert.match(child.stdout, /'os\.type':/);
      // A list of detectors runs in that order too, whatever order it is written in.
      const listed = await runChild({
        OTEL_TRACES_EXPORTER: "console",
        OTEL_NODE_RESOURCE_DETECTORS: "env,host",
        OTEL_RESOURCE_ATTRIBUTES: "host.name=appsvc-1",
      });
      assert.equal(listed.code, 0, listed.stderr);
      assert.match(listed.stdout, /'host\.name': 'appsvc-1'/);
      assert.doesNotMatch(listed.stdout, /'process\.pid'/);
    });

    it("limits a span's event and link attributes by the span limits, their old names too", async () => {
      const child = await runChild(
        {
          OTEL_TRACES_EXPORTER: "console",
          OTEL_SPAN_ATTRIBUTE_PER_EVENT_COUNT_LIMIT: "1",
          OTEL_LINK_ATTRIBUTE_COUNT_LIMIT: "2",
        },
        `
import { startProcessTelemetry, shutdownProcessTelemetry } from "./src/telemetry/register.ts";
if (!(await startProcessTelemetry())) process.exit(2);
const { trace } = await import("@opentelemetry/api");
const tracer = trace.getTracer("sbinbox");
const other = tracer.startSpan("other");
other.end();
const span = tracer.startSpan("limited", {
  links: [{ context: other.spanContext(), attributes: { a: 1, b: 2, c: 3 } }],
});
span.addEvent("retried", { a: 1, b: 2, c: 3 });
span.end();
const kept = (items) => items.map((item) => [item.attributes, item.droppedAttributesCount]);
process.stdout.write("limited " + JSON.stringify([kept(span.events), kept(span.links)]) + "\\n");
if (!(await shutdownProcessTelemetry())) process.exit();
`,
      );
      assert.equal(child.code, 0, child.stderr);
      const line = /^limited (.*)$/m.exec(child.stdout)?.[1];
      assert.ok(line, child.stdout);
      assert.deepEqual(JSON.parse(line), [[[{ a: 1 }, 2]], [[{ a: 1, b: 2 }, 1]]]);
    });

    it("with a wrong setting, says which and exits 2", async () => {
      const child = await runChild({ OTEL_TRACES_EXPORTER: "jaeger" });
      assert.equal(child.code, 2);
      assert.match(child.stderr, /OTEL_TRACES_EXPORTER: unknown exporter "jaeger"/);
    });

    it("sends spans and metrics to the OTLP endpoint", async () => {
      const server = createHttpServer();
      const received = collect(server);
      const port = await listen(server);
      try {
        const child = await runChild({ OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` });
        assert.equal(child.code, 0, child.stderr);
        const traces = received.find((r) => r.url === "/v1/traces");
        const metrics = received.find((r) => r.url === "/v1/metrics");
        assert.ok(traces && metrics, `received ${received.map((r) => r.url).join(", ")}`);
        assert.equal(traces.contentType, "application/x-protobuf");
        assert.ok(traces.body.includes("complete orders"));
        assert.ok(metrics.body.includes("sbinbox.test.count"));
      } finally {
        server.close();
      }
    });

    // A BatchSpanProcessor built in code takes only its options: these show OTEL_BSP_* reach it.
    it("batches spans by OTEL_BSP_MAX_EXPORT_BATCH_SIZE and drops beyond OTEL_BSP_MAX_QUEUE_SIZE", async () => {
      const server = createHttpServer();
      const received = collect(server);
      const port = await listen(server);
      try {
        const child = await runChild(
          {
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${port}/v1/traces`,
            OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
            OTEL_BSP_MAX_QUEUE_SIZE: "4",
            OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "2",
          },
          `
import { startProcessTelemetry, shutdownProcessTelemetry } from "./src/telemetry/register.ts";
if (!(await startProcessTelemetry())) process.exit(2);
const { trace } = await import("@opentelemetry/api");
// In one turn of the event loop: the 2nd span starts an export of 2, spans 3 to 6 fill the queue of 4,
// 7 to 10 find it full.
for (let i = 0; i < 10; i++) trace.getTracer("sbinbox").startSpan("span " + i).end();
if (!(await shutdownProcessTelemetry())) process.exit();
`,
        );
        assert.equal(child.code, 0, child.stderr);
        const perRequest = received
          .filter((r) => r.url === "/v1/traces")
          .map(
            (r) =>
              (
                JSON.parse(r.body.toString("utf8")) as {
                  resourceSpans: { scopeSpans: { spans: unknown[] }[] }[];
                }
              ).resourceSpans
                .flatMap((resource) => resource.scopeSpans)
                .flatMap((scope) => scope.spans).length,
          );
        assert.deepEqual(
          [perRequest.reduce((a, b) => a + b, 0), Math.max(...perRequest)],
          [6, 2],
          `spans per request ${perRequest.join(", ")}`,
        );
      } finally {
        server.close();
      }
    });

    // A collector that never answers: each export gives up after its set timeout, not the default 30 s (nor the
    // OTLP exporter's 10 s), within the child's 1 s bound on its shutdown.
    it("gives up an export after OTEL_BSP_EXPORT_TIMEOUT and OTEL_METRIC_EXPORT_TIMEOUT", async () => {
      const server = createHttpServer(() => {});
      const port = await listen(server);
      const script = CHILD.replace(
        /const flushed = [^]*$/,
        "await shutdownProcessTelemetry(1000);\nprocess.exit();\n",
      );
      try {
        const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` };
        const traces = await runChild(
          { ...endpoint, OTEL_METRICS_EXPORTER: "none", OTEL_BSP_EXPORT_TIMEOUT: "200" },
          script,
        );
        // The processor's own timeout rejects the shutdown, inside shutdownProcessTelemetry's 3 s.
        assert.match(traces.stderr, /telemetry shutdown failed: Error: Timeout/);
        const metrics = await runChild(
          {
            ...endpoint,
            OTEL_TRACES_EXPORTER: "none",
            OTEL_METRIC_EXPORT_TIMEOUT: "200",
            OTEL_LOG_LEVEL: "error",
          },
          script,
        );
        assert.match(metrics.stderr, /metrics export timed out after 200ms/);
      } finally {
        server.closeAllConnections();
        server.close();
      }
    });

    it("does not fail when the OTLP collector is not there", async () => {
      const server = createHttpServer();
      const port = await listen(server);
      await new Promise((closed) => server.close(closed));
      const child = await runChild({ OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` });
      assert.equal(child.code, 0, child.stderr);
      assert.equal(child.stdout, "child done\n");
    });
  });

  // Application Insights only takes HTTPS: a throwaway certificate stands in for its ingestion endpoint.
  if (spawnSync("openssl", ["version"]).status === 0) {
    describe("Azure Monitor (Application Insights)", () => {
      let dir: string;
      before(() => {
        dir = mkdtempSync(join(tmpdir(), "sbinbox-tls-"));
        const made = spawnSync("openssl", [
          ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"],
          ...["-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "2"],
          ...["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        ]);
        assert.equal(made.status, 0, made.stderr.toString());
      });
      after(() => rmSync(dir, { recursive: true, force: true }));

      it("sends spans and metrics to the ingestion endpoint of the connection string", async () => {
        const server = createHttpsServer({
          key: readFileSync(join(dir, "key.pem")),
          cert: readFileSync(join(dir, "cert.pem")),
        });
        const received = collect(server);
        const port = await listen(server);
        try {
          const child = await runChild({
            NODE_EXTRA_CA_CERTS: join(dir, "cert.pem"),
            APPLICATIONINSIGHTS_CONNECTION_STRING: `InstrumentationKey=00000000-0000-0000-0000-000000000001;IngestionEndpoint=https://127.0.0.1:${port}/`,
          });
          assert.equal(child.code, 0, child.stderr);
          const items = received
            .filter((r) => r.url === "/v2.1/track")
            .flatMap(
              (r) => JSON.parse(r.body.toString("utf8")) as { name: string; data: { baseData: unknown } }[],
            );
          const span = items.find((item) => item.name === "Microsoft.ApplicationInsights.RemoteDependency");
          assert.ok(span, `received ${items.map((i) => i.name).join(", ")}`);
          assert.deepEqual((span.data.baseData as { properties: unknown }).properties, {
            "messaging.servicebus.disposition_status": "complete",
          });
          assert.match(JSON.stringify(items), /"name":"sbinbox\.test\.count","kind":"Aggregation","value":3/);
        } finally {
          server.close();
        }
      });

      it("with microsoft.fixed_percentage, keeps about that share and sends its sample rate for itemCount", async () => {
        const server = createHttpsServer({
          key: readFileSync(join(dir, "key.pem")),
          cert: readFileSync(join(dir, "cert.pem")),
        });
        const received = collect(server);
        const port = await listen(server);
        try {
          const child = await runChild(
            {
              NODE_EXTRA_CA_CERTS: join(dir, "cert.pem"),
              APPLICATIONINSIGHTS_CONNECTION_STRING: `InstrumentationKey=00000000-0000-0000-0000-000000000001;IngestionEndpoint=https://127.0.0.1:${port}/`,
              OTEL_TRACES_SAMPLER: "microsoft.fixed_percentage",
              OTEL_TRACES_SAMPLER_ARG: "0.25",
              OTEL_METRICS_EXPORTER: "none",
            },
            MANY_SPANS_CHILD,
          );
          assert.equal(child.code, 0, child.stderr);
          const spans = received
            .filter((r) => r.url === "/v2.1/track")
            .flatMap((r) => JSON.parse(r.body.toString("utf8")) as { name: string; sampleRate?: number }[])
            .filter((item) => item.name === "Microsoft.ApplicationInsights.RemoteDependency");
          // 400 trace ids hashed at 25 %: about 100 kept (binomial, so 50 to 150 fails once in billions).
          assert.ok(spans.length >= 50 && spans.length <= 150, `kept ${spans.length} of 400`);
          // Application Insights counts each kept span as 100 / sampleRate = 4 items.
          assert.deepEqual([...new Set(spans.map((span) => span.sampleRate))], [25]);
        } finally {
          server.close();
        }
      });
    });
  }
});
