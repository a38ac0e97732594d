import assert from "node:assert/strict";
import { metrics } from "@opentelemetry/api";
import {
  AggregationTemporality,
  DataPointType,
  MeterProvider,
  MetricReader,
  type MetricData,
} from "@opentelemetry/sdk-metrics";
import { retryStartupStep, type StartupState } from "../../src/app/startup.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { workerMetrics } from "../../src/telemetry/metrics.ts";
import { Attr, Metric } from "../../src/telemetry/names.ts";
import {
  histogramOf,
  installTelemetryCapture,
  metricTotal,
  useTelemetryCapture,
} from "../helpers/telemetry.ts";

const queue = "orders";

describe("telemetry: the worker's metrics", () => {
  const telemetry = useTelemetryCapture();

  it("records each processed message's duration in seconds, its outcome and a duplicate absorbed", async () => {
    const m = workerMetrics();
    m.recordConsumed(queue, 3);
    m.recordProcessed({ queue, outcome: "committed", durationMs: 40 });
    m.recordProcessed({ queue, outcome: "duplicate", durationMs: 10 });
    m.recordProcessed({ queue, outcome: "failed", durationMs: 250, errorType: "unavailable" });
    const data = await telemetry().collect();

    assert.equal(metricTotal(data, Metric.consumedMessages, { [Attr.destinationName]: queue }), 3);
    const all = histogramOf(data, Metric.processDuration, { [Attr.messagingSystem]: "servicebus" });
    assert.equal(all.count, 3);
    assert.ok(Math.abs(all.sum - 0.3) < 1e-9, `sum ${all.sum}`);
    assert.equal(histogramOf(data, Metric.processDuration, { [Attr.errorType]: "unavailable" }).count, 1);
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "committed" }), 1);
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "duplicate" }), 1);
    assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "failed" }), 1);
    assert.equal(metricTotal(data, Metric.duplicatesAbsorbed, { [Attr.destinationName]: queue }), 1);
  });

  it("counts settlements that took effect by disposition, and failed ones apart", async () => {
    const m = workerMetrics();
    m.recordSettlement({ queue, disposition: "complete" });
    m.recordSettlement({ queue, disposition: "complete" });
    m.recordSettlement({ queue, disposition: "dead_letter" });
    m.recordSettlement({ queue, disposition: "abandon", errorType: "MessageLockLost" });
    const data = await telemetry().collect();

    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "complete" }), 2);
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "dead_letter" }), 1);
    assert.equal(metricTotal(data, Metric.dispositions, { [Attr.dispositionStatus]: "abandon" }), 0);
    assert.equal(
      metricTotal(data, Metric.settlementFailures, {
        [Attr.dispositionStatus]: "abandon",
        [Attr.errorType]: "MessageLockLost",
      }),
      1,
    );
  });

  it("records outage pauses in seconds", async () => {
    workerMetrics().recordOutagePause(12_500);
    const pause = histogramOf(await telemetry().collect(), Metric.outagePause);
    assert.deepEqual(pause, { count: 1, sum: 12.5 });
  });

  it("reports open claims from its source at each collection, nothing when the read fails, and stops", async () => {
    let open = 4;
    const stop = workerMetrics().observeOpenClaims(() => Promise.resolve(open), {
      [Attr.consumer]: "credit",
    });
    const stopFailing = workerMetrics().observeOpenClaims(() => Promise.reject(new Error("database down")), {
      [Attr.consumer]: "other",
    });
    try {
      assert.equal(
        metricTotal(await telemetry().collect(), Metric.openClaims, { [Attr.consumer]: "credit" }),
        4,
      );
      open = 1;
      const data = await telemetry().collect();
      assert.equal(metricTotal(data, Metric.openClaims, { [Attr.consumer]: "credit" }), 1);
      const other = data.find((d) => d.descriptor.name === Metric.openClaims)?.dataPoints ?? [];
      assert.equal(other.filter((p) => p.attributes[Attr.consumer] === "other").length, 0);
    } finally {
      stop();
      stopFailing();
    }
    const after = await telemetry().collect();
    const points = after.find((d) => d.descriptor.name === Metric.openClaims)?.dataPoints ?? [];
    assert.equal(points.length, 0);
  });
});

describe("telemetry: the start-up wait", () => {
  const telemetry = useTelemetryCapture();

  it("reports each waiting step's time so far and its state, and nothing once the step is through", async () => {
    let failed!: () => void;
    const failedOnce = new Promise<void>((resolve) => (failed = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let attempts = 0;
    const waiting = retryStartupStep(
      {
        name: "serviceBus",
        attempt: async () => {
          attempts += 1;
          if (attempts === 1) throw new Error("getaddrinfo ENOTFOUND");
          await released;
        },
        classify: () => "unreachable",
      },
      {
        backoffMinMs: 1,
        backoffMaxMs: 1,
        refusedLimitMs: 0,
        logger: createLogger({ level: "error", write: () => undefined }),
        onState: (_, state: StartupState) => state === "unreachable" && failed(),
      },
    );
    await failedOnce;
    const points = (await telemetry().collect()).find(
      (d) => d.descriptor.name === Metric.startupWait,
    )?.dataPoints;
    assert.equal(points?.length, 1);
    assert.deepEqual(points[0]!.attributes, {
      [Attr.startupStep]: "serviceBus",
      [Attr.startupState]: "unreachable",
    });
    assert.ok((points[0]!.value as number) >= 0);
    release();
    await waiting;
    const after = (await telemetry().collect()).find((d) => d.descriptor.name === Metric.startupWait);
    assert.equal(after?.dataPoints.length ?? 0, 0);
  });
});

describe("telemetry: metrics recorded before and after the SDK starts", () => {
  it("are dropped before, and counted once a meter provider is registered", async () => {
    workerMetrics().recordProcessed({ queue, outcome: "committed", durationMs: 1 });
    const capture = installTelemetryCapture();
    try {
      workerMetrics().recordProcessed({
        queue,
        outcome: "poison",
        durationMs: 1,
        errorType: "SchemaViolation",
      });
      const data = await capture.collect();
      assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "committed" }), 0);
      assert.equal(metricTotal(data, Metric.outcomes, { [Attr.outcome]: "poison" }), 1);
    } finally {
      await capture.stop();
    }
  });
});

describe("telemetry: the per-message counters, tallied and reported at collection", () => {
  it("are monotonic Sums, cumulative across collections, with their names, units and attribute sets", async () => {
    metrics.disable();
    const reader = new CumulativeReader();
    const provider = new MeterProvider({ readers: [reader] });
    metrics.setGlobalMeterProvider(provider);
    try {
      const m = workerMetrics();
      m.recordConsumed(queue, 2);
      m.recordProcessed({ queue, outcome: "duplicate", durationMs: 5 });
      m.recordSettlement({ queue, disposition: "complete" });
      const first = allOf((await reader.collect()).resourceMetrics.scopeMetrics);
      m.recordConsumed(queue);
      m.recordProcessed({ queue, outcome: "duplicate", durationMs: 5 });
      m.recordSettlement({ queue, disposition: "complete" });
      const second = allOf((await reader.collect()).resourceMetrics.scopeMetrics);
      for (const name of [
        Metric.consumedMessages,
        Metric.outcomes,
        Metric.dispositions,
        Metric.duplicatesAbsorbed,
      ]) {
        const metric = second.find((d) => d.descriptor.name === name);
        assert.ok(metric, name);
        assert.equal(metric.dataPointType, DataPointType.SUM, name);
        assert.equal(metric.isMonotonic, true, name);
        assert.equal(metric.aggregationTemporality, AggregationTemporality.CUMULATIVE, name);
        assert.equal(metric.descriptor.unit, "{message}", name);
      }
      const destination = { [Attr.messagingSystem]: "servicebus", [Attr.destinationName]: queue };
      assert.equal(
        metricTotal(first, Metric.consumedMessages, { ...destination, [Attr.operationName]: "receive" }),
        2,
      );
      assert.equal(
        metricTotal(second, Metric.consumedMessages, { ...destination, [Attr.operationName]: "receive" }),
        3,
      );
      assert.equal(metricTotal(second, Metric.outcomes, { ...destination, [Attr.outcome]: "duplicate" }), 2);
      assert.equal(metricTotal(second, Metric.duplicatesAbsorbed, destination), 2);
      assert.equal(metricTotal(second, Metric.dispositions, { [Attr.dispositionStatus]: "complete" }), 2);
      // Only what was counted is reported: no zero points for outcomes and dispositions that never happened.
      const outcomes = second.find((d) => d.descriptor.name === Metric.outcomes)!;
      assert.deepEqual(
        outcomes.dataPoints.map((p) => p.attributes[Attr.outcome]),
        ["duplicate"],
      );
      assert.deepEqual(
        second.find((d) => d.descriptor.name === Metric.duplicatesAbsorbed)!.dataPoints[0]!.attributes,
        destination,
      );
    } finally {
      await provider.shutdown();
      metrics.disable();
    }
  });
});

class CumulativeReader extends MetricReader {
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

function allOf(scopes: { metrics: MetricData[] }[]): MetricData[] {
  return scopes.flatMap((s) => s.metrics);
}
