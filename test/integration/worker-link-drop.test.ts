import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import type { Database } from "../../src/app/database.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { Attr, Metric } from "../../src/telemetry/names.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { capturedLogs } from "../helpers/logs.ts";
import { StallProxy } from "../helpers/stall-proxy.ts";
import { metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";
import { startCli } from "../helpers/cli.ts";
import { countCredits, creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";
/** Short locks, so what a lost settlement leaves behind comes back within the test. */
const LOCK_MS = 3_000;
/** The settlement guard's least wait (SettlementGuard's MIN_WAIT_MS), the bound on a silent link's settlement here. */
const SETTLE_BOUND_MS = Math.max(5_000, LOCK_MS);
/**
 * The silence: long past each message's lock and the silence threshold below (scaled down from Azure's);
 * SBINBOX_TEST_SILENCE_MS=30000 runs the 30 s of the outside fault test.
 */
const SILENCE_MS = Number(process.env.SBINBOX_TEST_SILENCE_MS ?? 10_000);
/** Thresholds scaled down: what is tested is their order, not the wall clock. */
const PROGRESS = { quietMs: 300, probeTimeoutMs: 2_000, silentAfterMs: 4_000, recoverAfterMs: 1_000 };
const GRACE_MS = 20_000;

/** A gate the handlers' settlements wait at until the test opens it. */
function gate() {
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (open = resolve));
  let waiting = 0;
  return {
    open,
    get waiting() {
      return waiting;
    },
    beforeSettle: async (): Promise<void> => {
      waiting += 1;
      await opened;
    },
  };
}

for (const batchSize of [1, 8]) {
  describe(`worker: a broken link to Service Bus, through a TCP proxy (batch size ${batchSize})`, function () {
    const fixture = useLocalBroker(
      brokerConfig({ [QUEUE]: { LockDuration: `PT${LOCK_MS / 1000}S`, MaxDeliveryCount: 10 } }),
    );
    const telemetry = useTelemetryCapture();
    let db: Database;
    let proxy: StallProxy;
    let proxied: ServiceBusClient;
    let workers: Worker[] = [];
    let run = 0;

    before(async () => {
      db = await exampleDatabase(`link_drop_${batchSize}`);
    });
    after(async () => {
      await db?.close();
    });
    beforeEach(async () => {
      proxy = await StallProxy.start(fixture.broker.port);
      // The SDK's own defaults (60 s settlement time-out, 3 retries 30 s apart): what a deployment runs.
      proxied = new ServiceBusClient(
        fixture.broker.connectionString.replace(
          `sb://localhost:${fixture.broker.port};`,
          `sb://127.0.0.1:${proxy.port};`,
        ),
      );
      run += 1;
    });
    afterEach(async () => {
      proxy.resume();
      for (const worker of workers) await worker.stop();
      workers = [];
      await proxied.close();
      await proxy.close();
    });

    async function publish(prefix: string, count: number): Promise<string[]> {
      const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
      try {
        const events = Array.from({ length: count }, (_, i) => demoEvent(`${prefix}-${batchSize}-${run}`, i));
        return (await publisher.publishBatch(events)).map((r) => r.messageId);
      } finally {
        await publisher.close();
      }
    }

    /** Waits until the queue is empty, then checks each of `ids` was applied exactly once. */
    async function appliedOnce(ids: readonly string[], timeoutMs: number): Promise<void> {
      const counts = () => fixture.broker.counts(QUEUE);
      await waitUntil(() => counts().active + counts().locked === 0, "the queue empties", timeoutMs);
      const credits = await creditsPerMessage(db);
      assert.deepEqual(
        ids.map((id) => credits.get(id) ?? 0),
        ids.map(() => 1),
        "each message applied once",
      );
      assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0, "nothing dead-lettered");
      assert.equal((await takeDeadLetters(fixture.client, QUEUE)).length, 0);
    }

    /** A worker on the proxied client whose settlements wait at a gate, its log lines kept. */
    function gatedWorker(count: number) {
      const logs = capturedLogs();
      const settling = gate();
      const worker = startTestWorker({
        client: proxied,
        db,
        maxConcurrentCalls: count,
        batchSize,
        gracePeriodMs: GRACE_MS,
        beforeSettle: settling.beforeSettle,
        logger: logs.logger,
        progress: PROGRESS,
      });
      workers.push(worker);
      return { logs, settling, worker };
    }

    it("a reset while completes are in flight: each applied once, nothing in flight at once, a stop right after is quick", async function () {
      this.timeout(60_000);
      const count = 8;
      const { logs, settling, worker } = gatedWorker(count);
      const ids = await publish("reset", count);
      // Every message committed and about to be completed; then the completes go into a link that forwards nothing.
      await waitUntil(() => settling.waiting === count, "every message committed", 20_000);
      proxy.stall();
      settling.open();
      await waitUntil(() => worker.settling === count, "every complete sent", 10_000);
      const resetAt = Date.now();
      proxy.reset();
      await waitUntil(
        () => worker.inFlight === 0 && worker.settling === 0,
        "nothing in flight",
        SETTLE_BOUND_MS,
      );
      const freedMs = Date.now() - resetAt;
      // The SDK alone: 60 s per attempt, 4 attempts 30 s apart (330 s). The guard ends them on the drop itself.
      assert.ok(freedMs < 2_000, `in flight until ${freedMs} ms after the reset`);
      // What SIGTERM does (src/cli/worker.ts through app.stop): stop the worker, then close the client.
      const stopAt = Date.now();
      await worker.stop();
      await proxied.close();
      const stopMs = Date.now() - stopAt;
      assert.ok(stopMs < GRACE_MS / 4, `a stop right after the reset took ${stopMs} ms`);

      const notConfirmed = logs.lines.filter((l) => l.reason === "connection-dropped");
      assert.equal(notConfirmed.length, count, "one line per settlement given up");
      for (const line of notConfirmed) {
        assert.equal(line.level, "warn");
        assert.match(
          String(line.msg),
          /^complete not confirmed: the connection the message came on dropped; stopped waiting for it; unless it took effect, the broker redelivers it when its lock expires, and the inbox completes the redelivery as a duplicate$/,
        );
      }
      assert.equal(worker.stats.settlementFailures, count);
      const data = await telemetry().collect();
      assert.equal(
        metricTotal(data, Metric.settlementFailures, { [Attr.errorType]: "SettlementUnconfirmed" }),
        count,
      );

      // The completes never reached the broker: each lock expires, the message comes back, the inbox absorbs it.
      const second = startTestWorker({ client: fixture.client, db, batchSize, progress: PROGRESS });
      workers.push(second);
      await waitUntil(() => second.stats.duplicate === count, "the redeliveries are duplicates", 20_000);
      await appliedOnce(ids, 10_000);
    });

    it("a reset before the settlements, the link open again: each given up within the bound, each applied once", async function () {
      this.timeout(60_000);
      const count = 4;
      const logs = capturedLogs();
      const settling = gate();
      let held: Set<string> = new Set();
      const worker = startTestWorker({
        client: proxied,
        db,
        maxConcurrentCalls: count + 1,
        batchSize,
        beforeSettle: (message) => (held.has(message.messageId) ? settling.beforeSettle() : undefined),
        logger: logs.logger,
        progress: PROGRESS,
      });
      workers.push(worker);
      held = new Set(await publish("before", count));
      await waitUntil(() => settling.waiting === count, "every message committed", 20_000);
      proxy.reset();
      // A message received and settled after the reset: the SDK has opened its receive link again, under the same
      // name, so the held messages' completes go to a link that never delivered them.
      const [canary] = await publish("canary", 1);
      await waitUntil(() => worker.stats.settled === 1, "a message settles on the new link", 20_000);
      const openedAt = Date.now();
      settling.open();
      await waitUntil(() => worker.inFlight === 0, "nothing in flight", SETTLE_BOUND_MS + 2_000);
      const freedMs = Date.now() - openedAt;
      assert.ok(freedMs < SETTLE_BOUND_MS + 1_000, `in flight until ${freedMs} ms after the completes`);
      const given = logs.lines.filter((l) => l.reason === "connection-dropped");
      assert.equal(given.length, count, JSON.stringify(logs.lines.filter((l) => l.level === "warn")));
      // Redelivered on the worker's new connection once each lock expires, and absorbed.
      await waitUntil(() => worker.stats.duplicate === count, "the redeliveries are duplicates", 20_000);
      await appliedOnce([...held, canary!], 10_000);
    });

    it("a silent link: not ready while it lasts, ready again after it answers; nothing lost or dead-lettered", async function () {
      this.timeout(60_000 + SILENCE_MS * 2);
      const count = 8;
      const { logs, settling, worker } = gatedWorker(count);
      // An idle queue first: the probes answer, so it stays ready through several quiet periods.
      const idleUntil = Date.now() + PROGRESS.silentAfterMs * 1.5;
      while (Date.now() < idleUntil) {
        const ready = await worker.readiness();
        assert.deepEqual([ready.ready, ready.serviceBus], [true, "ok"], "ready on an idle queue");
        await new Promise((resolve) => setTimeout(resolve, 100));
      }

      const ids = await publish("silent", count);
      await waitUntil(() => settling.waiting === count, "every message committed", 20_000);
      const silentAt = Date.now();
      proxy.stall();
      settling.open();
      await waitUntil(() => worker.settling === count, "every complete sent into the silence", 10_000);
      let turnedAt = 0;
      await waitUntil(
        () =>
          logs.lines.some((l) => String(l.msg).startsWith("Service Bus silent")) &&
          (turnedAt = Date.now()) > 0,
        "the worker sees the silence",
        SILENCE_MS,
      );
      const ready = await worker.readiness();
      assert.deepEqual(
        [ready.ready, ready.status, ready.receiver, ready.serviceBus],
        [false, "running", "attached", "silent"],
      );
      const during = await telemetry().collect();
      assert.ok(
        metricTotal(during, Metric.serviceBusSilence, { [Attr.serviceBusState]: "silent" }) * 1000 >=
          PROGRESS.silentAfterMs,
        "the gauge shows the silence",
      );
      // The completes are bounded by the messages' locks, not by the SDK's 330 s.
      await waitUntil(() => worker.inFlight === 0, "nothing in flight", SETTLE_BOUND_MS + 2_000);
      const given = logs.lines.filter((l) => l.reason === "lock-expired");
      assert.equal(given.length, count);
      assert.match(
        String(given[0]!.msg),
        /^complete not confirmed: no answer before the message's lock expired/,
      );

      await new Promise((resolve) => setTimeout(resolve, Math.max(0, silentAt + SILENCE_MS - Date.now())));
      assert.equal((await worker.readiness()).ready, false, "still not ready at the end of the silence");
      const resumedAt = Date.now();
      proxy.resume();
      await waitUntil(
        () => logs.lines.some((l) => String(l.msg).startsWith("Service Bus answers again")),
        "ready again",
        15_000,
      );
      const recoveredMs = Date.now() - resumedAt;
      const after = await worker.readiness();
      assert.deepEqual([after.ready, after.serviceBus], [true, "ok"]);
      assert.ok(
        recoveredMs >= PROGRESS.recoverAfterMs - 50,
        `ready again ${recoveredMs} ms after: hysteresis`,
      );
      // The buffered completes reached the broker after the locks expired (refused); the messages came back.
      await waitUntil(() => worker.stats.duplicate >= count, "the redeliveries are duplicates", 20_000);
      await appliedOnce(ids, 10_000);
      assert.ok(turnedAt - silentAt < SILENCE_MS, `silent after ${turnedAt - silentAt} ms`);
    });
  });
}

describe("sbinbox worker as a process: SIGTERM right after a reset", function () {
  // Locks long past the test's stall, so that a complete caught by the reset ends on the drop, never on its lock
  // running out first (which a loaded machine's slower commits could otherwise make it do: a message taken into
  // the stall with little of a short lock left). The broker's clock then moves past them, so the next worker gets
  // what the dropped connection held at once instead of after the lock's wall-clock time.
  const CLI_LOCK_MS = 60_000;
  let clockAheadMs = 0;
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { LockDuration: `PT${CLI_LOCK_MS / 1000}S` } }), {
    now: () => Date.now() + clockAheadMs,
  });

  it("exits 0 well inside the grace period; every message applied once by the next worker", async function () {
    this.timeout(120_000);
    const db = await exampleDatabase("link_drop_cli");
    const proxy = await StallProxy.start(fixture.broker.port);
    const next: Worker[] = [];
    try {
      const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
      const ids: string[] = [];
      const events = Array.from({ length: 300 }, (_, i) => demoEvent("cli-reset", i));
      for (let i = 0; i < events.length; i += 100)
        ids.push(...(await publisher.publishBatch(events.slice(i, i + 100))).map((r) => r.messageId));
      await publisher.close();
      const { child, done } = startCli(["worker"], {
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString.replace(
          `sb://localhost:${fixture.broker.port};`,
          `sb://127.0.0.1:${proxy.port};`,
        ),
        SBINBOX_POSTGRES_URL: db.url,
        PORT: "0",
        SBINBOX_HTTP_HOST: "127.0.0.1",
        SBINBOX_GRACE_PERIOD_MS: String(GRACE_MS),
        SBINBOX_LOG_LEVEL: "warn",
      });
      await waitUntil(() => child.exitCode === null, "the worker runs");
      let applied = 0;
      while (applied < 30 && child.exitCode === null) applied = await countCredits(db);
      // Stalled, the worker still commits what it holds; the completes of those go into the stall.
      proxy.stall();
      const atStall = await countCredits(db);
      const deadline = Date.now() + 10_000;
      while ((await countCredits(db)) === atStall && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 20));
      proxy.reset();
      const signalledAt = Date.now();
      child.kill("SIGTERM");
      const result = await done;
      const exitMs = Date.now() - signalledAt;
      assert.equal(result.code, 0, result.stderr.slice(-2000));
      assert.ok(exitMs < GRACE_MS / 2, `exited ${exitMs} ms after SIGTERM (grace period ${GRACE_MS} ms)`);
      assert.match(result.stderr, /complete not confirmed: the connection the message came on dropped/);

      clockAheadMs += CLI_LOCK_MS;
      next.push(startTestWorker({ client: fixture.client, db, consumer: "sbinbox" }));
      const counts = () => fixture.broker.counts(QUEUE);
      await waitUntil(() => counts().active + counts().locked === 0, "the queue empties", 30_000);
      const credits = await creditsPerMessage(db);
      assert.deepEqual(
        ids.filter((id) => credits.get(id) !== 1),
        [],
        "each message applied once",
      );
      assert.equal(counts().deadLettered, 0);
    } finally {
      for (const worker of next) await worker.stop();
      await proxy.close();
      await db.close();
    }
  });
});
