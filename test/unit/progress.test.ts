import assert from "node:assert/strict";
import type { LinkProbe } from "../../src/servicebus/link-probe.ts";
import { ProgressMonitor } from "../../src/worker/progress.ts";
import { SettlementUnconfirmedError } from "../../src/servicebus/settlement-guard.ts";
import { ServiceBusError } from "@azure/service-bus";
import { waitUntil } from "../helpers/broker.ts";
import { capturedLogs } from "../helpers/logs.ts";

const SETTINGS = { quietMs: 40, probeTimeoutMs: 40, silentAfterMs: 400, recoverAfterMs: 300 };

/** A probe the test scripts: answers while `answering`, else fails as a time-out would; counts its calls. */
function scriptedProbe() {
  const probe = {
    answering: true,
    /** Answers to give even while not answering (one answer amid silence). */
    answersLeft: 0,
    calls: 0,
    answers: [] as number[],
    check(): Promise<void> {
      probe.calls += 1;
      if (!probe.answering && probe.answersLeft === 0) return Promise.reject(new Error("no answer"));
      if (!probe.answering) probe.answersLeft -= 1;
      probe.answers.push(Date.now());
      return Promise.resolve();
    },
    close: () => Promise.resolve(),
  } satisfies LinkProbe & Record<string, unknown>;
  return probe;
}

describe("ProgressMonitor: a silent link told from an idle queue, with hysteresis", function () {
  let stop: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await stop?.();
    stop = undefined;
  });

  /** A started monitor on a scripted probe that answers or not; stopped after the test. */
  function started(answering: boolean, settings: Partial<typeof SETTINGS> = {}) {
    const probe = scriptedProbe();
    probe.answering = answering;
    const { logger, lines } = capturedLogs();
    const monitor = new ProgressMonitor({ ...SETTINGS, ...settings, probe, logger, queue: "q" });
    monitor.start();
    stop = () => monitor.stop();
    return { probe, monitor, lines };
  }

  it("an idle queue whose probes answer stays ok through many quiet periods", async () => {
    const { probe, monitor } = started(true);
    const until = Date.now() + SETTINGS.silentAfterMs * 3;
    while (Date.now() < until) {
      assert.equal(monitor.state, "ok");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.ok(probe.calls >= 3, `probed ${probe.calls} times while nothing else was heard`);
  });

  it("unanswered probes turn it silent only after silentAfterMs without an answer", async () => {
    const { monitor, lines } = started(false);
    await waitUntil(() => monitor.state === "silent", "silent", 5_000);
    const line = lines.find((l) => String(l.msg).startsWith("Service Bus silent"));
    assert.ok(Number(line?.silentMs) >= SETTINGS.silentAfterMs, `silent after ${String(line?.silentMs)} ms`);
    assert.equal(line?.level, "warn");
  });

  it("messages received keep it ok while probes fail (a busy queue through resets)", async () => {
    // Messages 100 ms apart: past the quiet time, so probes run (and fail) between them, far inside the threshold.
    const silentAfterMs = 2_000;
    const { probe, monitor } = started(false, { silentAfterMs });
    const until = Date.now() + silentAfterMs * 1.5;
    while (Date.now() < until) {
      monitor.heard();
      assert.equal(monitor.state, "ok");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.equal(monitor.state, "ok");
    assert.ok(probe.calls > 0, "probes ran, unanswered, between the messages");
  });

  it("one answer amid silence does not make it ok; answers throughout recoverAfterMs do", async () => {
    const { probe, monitor, lines } = started(false);
    await waitUntil(() => monitor.state === "silent", "silent", 5_000);
    // One answer, then silence again: still silent, and the recovery starts over.
    probe.answersLeft = 1;
    await waitUntil(() => probe.answers.length === 1, "one answer", 5_000);
    const failedAfter = probe.calls;
    await waitUntil(() => probe.calls > failedAfter, "a probe fails again", 5_000);
    assert.equal(monitor.state, "silent");
    // Answers from now on: ok once they have come for recoverAfterMs.
    const answersFrom = Date.now();
    probe.answering = true;
    await waitUntil(() => monitor.state === "ok", "ok again", 5_000);
    const recoveredAfter = Date.now() - answersFrom;
    assert.ok(recoveredAfter >= SETTINGS.recoverAfterMs - 5, `ok again after ${recoveredAfter} ms`);
    assert.ok(lines.some((l) => String(l.msg).startsWith("Service Bus answers again")));
  });

  it("a settlement answered is heard; one that waited out its lock counts as unanswered", async () => {
    const { monitor } = started(false);
    await waitUntil(() => monitor.state === "silent", "silent", 5_000);
    const lockExpired = new SettlementUnconfirmedError("lock-expired", 5_000, undefined);
    monitor.settled({ settled: false, error: lockExpired, disposition: "complete" });
    assert.ok(monitor.silenceMs >= SETTINGS.silentAfterMs, "waiting out a lock is not an answer");
    monitor.settled({ settled: true, disposition: "complete" });
    assert.ok(monitor.silenceMs < SETTINGS.silentAfterMs, "an answered settlement is heard");
  });

  it("the SDK's local errors (a session link no longer alive, its own time-out) are not an answer; a refusal is", async () => {
    const { monitor } = started(false);
    await waitUntil(() => monitor.state === "silent", "silent", 5_000);
    const local = [
      new ServiceBusError(
        "Failed to complete the message as the AMQP link ... is no longer alive.",
        "SessionLockLost",
      ),
      new ServiceBusError("Operation to settle the message has timed out.", "ServiceTimeout"),
      new AggregateError([new ServiceBusError("timed out", "ServiceTimeout")]),
    ];
    for (const error of local) monitor.settled({ settled: false, error, disposition: "complete" });
    assert.ok(monitor.silenceMs >= SETTINGS.silentAfterMs, "local errors are not heard");
    const refused = new ServiceBusError("The lock supplied is invalid.", "MessageLockLost");
    monitor.settled({ settled: false, error: refused, disposition: "complete" });
    assert.ok(monitor.silenceMs < SETTINGS.silentAfterMs, "the broker's refusal is heard");
  });

  it("receive errors with the link still closed after silentAfterMs: refused; the link open again: ok", async () => {
    const { monitor, lines } = started(true);
    let open = false;
    monitor.receiveError(new ServiceBusError("refused", "GeneralError"), () => open);
    assert.equal(monitor.state, "ok", "one error is not yet a refusal");
    await waitUntil(() => monitor.state === "refused", "refused", 5_000);
    const line = lines.find((l) => String(l.msg).startsWith("Service Bus refuses"));
    assert.ok(
      Number(line?.refusedMs) >= SETTINGS.silentAfterMs,
      `refused after ${String(line?.refusedMs)} ms`,
    );
    open = true;
    await waitUntil(() => monitor.state === "ok", "ok once the link is open", 5_000);
  });

  it("a receive error the SDK recovers from (the link open again) never turns it refused", async () => {
    const { monitor } = started(true);
    let open = false;
    monitor.receiveError(new ServiceBusError("connection reset", "ServiceCommunicationProblem"), () => open);
    open = true;
    const until = Date.now() + SETTINGS.silentAfterMs * 2;
    while (Date.now() < until) {
      assert.equal(monitor.state, "ok");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  });
});
