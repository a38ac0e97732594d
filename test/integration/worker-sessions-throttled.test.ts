import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { OWN_RETRY } from "../../src/servicebus/throttling.ts";
import { Metric } from "../../src/telemetry/names.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sessions-throttled";
/** A session lock long enough (30 s) that only the session's link closing can end a settle loop in time. */
const LONG_QUEUE = "sessions-throttled-long";

/** Records each call; its table is the inbox's: a message applied twice would show as a second call at attempt 0. */
function stepHandler(calls: Map<string, [number, number][]>): MessageHandler {
  return {
    kind: "transactional",
    type: "Step",
    schema: z.object({ seq: z.number() }),
    handle(body, _tx, context) {
      const { seq } = body as { seq: number };
      const session = context.sessionId ?? "";
      calls.set(session, [...(calls.get(session) ?? []), [seq, context.deliveryCount]]);
      return Promise.resolve();
    },
  };
}

function warningsLogger(warnings: string[]) {
  return {
    debug: () => undefined,
    info: () => undefined,
    warn: (message: string) => warnings.push(message),
    error: (message: string) => warnings.push(message),
    child() {
      return this;
    },
  };
}

/**
 * Session receivers under throttling, through the real SDK on the local broker's sessions. A session message's
 * settlement throttled on its link is sent again on the session receiver, by lock token with the session id, only
 * while the session's link is open; once the session is given up the tries stop and the message is the broker's
 * again, counted.
 */
describe("worker in session mode: settlements throttled (ServerBusy) on session receivers", function () {
  this.timeout(90_000);
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { RequiresSession: true, LockDuration: "PT2S" },
      [LONG_QUEUE]: { RequiresSession: true, LockDuration: "PT30S" },
    }),
  );
  const telemetry = useTelemetryCapture();
  let db: Database;
  let client: ServiceBusClient;
  let worker: Worker | undefined;
  before(async () => {
    db = await exampleDatabase("worker_sessions_throttled");
    client = new ServiceBusClient(fixture.broker.connectionString, { retryOptions: OWN_RETRY });
  });
  afterEach(async () => {
    fixture.broker.throttle({});
    await worker?.stop();
    worker = undefined;
  });
  after(async () => {
    await client.close();
    await db.close();
  });

  /** Settle tries the broker has seen, refused or not. */
  function settleTries(): number {
    const { admitted, throttled } = fixture.broker.throttleCounts().settle;
    return admitted + throttled;
  }

  async function send(sessions: string[], perSession: number, queue = QUEUE): Promise<void> {
    const sender = fixture.client.createSender(queue);
    for (const session of sessions)
      await sender.sendMessages(
        Array.from({ length: perSession }, (_, seq) => ({
          messageId: `${session}-${seq}`,
          sessionId: session,
          subject: "Step",
          body: Buffer.from(JSON.stringify({ seq })),
        })),
      );
    await sender.close();
  }

  it("at 30% throttled (settle, management, receive): every message applied once, in order, at its first delivery", async function () {
    const calls = new Map<string, [number, number][]>();
    const warnings: string[] = [];
    const sessions = ["a", "b", "c"].map((s) => `t30-${s}`);
    await send(sessions, 6);
    const before = fixture.broker.throttleCounts().settle.throttled;
    fixture.broker.throttle({ settle: { share: 0.3 }, management: { share: 0.3 }, receive: { share: 0.3 } });
    worker = startTestWorker({
      client,
      db,
      queue: QUEUE,
      consumer: "t30",
      handlers: [stepHandler(calls)],
      sessions: { maxSessions: 3, idleMs: 500 },
      logger: warningsLogger(warnings),
    });
    await waitUntil(() => worker!.stats.committed >= 18, "18 messages applied", 60_000);
    await waitUntil(() => {
      const c = fixture.broker.counts(QUEUE);
      return c.active + c.locked === 0;
    }, "the queue empty");
    const throttled = fixture.broker.throttleCounts().settle.throttled - before;
    fixture.broker.throttle({});
    assert.ok(throttled > 0, "some settlements were throttled");
    for (const session of sessions)
      assert.deepEqual(
        calls.get(session),
        [0, 1, 2, 3, 4, 5].map((seq) => [seq, 0]),
        `session ${session}: in order, once, first delivery`,
      );
    assert.equal(worker.stats.duplicate, 0);
    assert.equal(worker.stats.throttledToRedelivery, 0);
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    const metrics = await telemetry().collect();
    assert.equal(
      metricTotal(metrics, Metric.throttled, { "sbinbox.servicebus.operation": "settle" }),
      throttled,
      "each throttled settle counted by the worker as the broker counted it",
    );
    process.stdout.write(
      `      settlements throttled and sent again on their session receivers: ${throttled}\n`,
    );
  });

  it("the session given up while its settlement is throttled: no try after, counted, the message redelivered and completed once", async function () {
    const calls = new Map<string, [number, number][]>();
    const warnings: string[] = [];
    const session = "gone";
    // Every settlement and every session lock renewal refused: the session's lock runs out and the slot gives it up.
    fixture.broker.throttle({ settle: { share: 1 }, management: { share: 1 } });
    // A message seen again (its session taken anew after the lock ran out) waits here until the first loop has been
    // watched, so that a settle try counted meanwhile could only be that loop's.
    const seenBefore = new Set<string>();
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    worker = startTestWorker({
      client,
      db,
      queue: QUEUE,
      consumer: "gone",
      handlers: [stepHandler(calls)],
      sessions: { maxSessions: 1, idleMs: 500 },
      lockDurationMs: 2_000,
      logger: warningsLogger(warnings),
      beforeSettle: async (message) => {
        if (seenBefore.has(message.messageId)) await released;
        seenBefore.add(message.messageId);
      },
    });
    await send([session], 2);
    const started = Date.now();
    await waitUntil(
      () => worker!.stats.throttledToRedelivery >= 1,
      "the settle loop ended with the session",
      15_000,
    );
    const gaveUpAfter = Date.now() - started;
    assert.ok(
      warnings.some((w) =>
        /its session's link closed or its lock ended: the message is left to the broker's redelivery/.test(w),
      ),
      `the message is said to be left to the broker: ${JSON.stringify(warnings)}`,
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    const settleTries = fixture.broker.throttleCounts().settle;
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    assert.deepEqual(
      fixture.broker.throttleCounts().settle,
      settleTries,
      "no settle try after the session ended",
    );
    assert.equal(
      worker.stats.throttledToRedelivery,
      1,
      `${JSON.stringify(warnings)} ${JSON.stringify(calls.get(session))}`,
    );
    fixture.broker.throttle({});
    release();
    await waitUntil(
      () => {
        const c = fixture.broker.counts(QUEUE);
        return worker!.stats.committed >= 2 && c.active + c.locked === 0;
      },
      "the session drained",
      30_000,
    );
    const seen = calls.get(session) ?? [];
    assert.deepEqual([...new Set(seen.map(([seq]) => seq))], [0, 1], `in order: ${JSON.stringify(seen)}`);
    assert.equal(worker.stats.committed, 2, "each message applied once");
    assert.ok(worker.stats.duplicate >= 1, "the redelivery completed as a duplicate");
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    process.stdout.write(
      `      settle loop ended with its session ${gaveUpAfter} ms after the send; no try in the 2.5 s after\n`,
    );
  });

  it("the session's link closed while its settlement is throttled (the worker stopped): no try after, counted, completed once by the next worker", async function () {
    const calls = new Map<string, [number, number][]>();
    const warnings: string[] = [];
    const session = "closed";
    // Settlements refused, session lock renewals answered: the 30 s session lock stays held, so only the link
    // closing (the slot giving the session up as the worker stops) can end the settle loop before 30 s.
    fixture.broker.throttle({ settle: { share: 1 } });
    worker = startTestWorker({
      client,
      db,
      queue: LONG_QUEUE,
      consumer: "closed",
      handlers: [stepHandler(calls)],
      sessions: { maxSessions: 1, idleMs: 500 },
      logger: warningsLogger(warnings),
    });
    await send([session], 1, LONG_QUEUE);
    await waitUntil(
      () => fixture.broker.throttleCounts().settle.throttled >= 3,
      "the settlement refused and sent again by lock token",
      15_000,
    );
    assert.equal(worker.stats.throttledToRedelivery, 0, "still trying while the session is held");
    const triesAtStop = settleTries();
    const stopping = Date.now();
    const first = worker;
    await first.stop();
    const stopTook = Date.now() - stopping;
    const triesAfterStop = settleTries() - triesAtStop;
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    assert.equal(settleTries() - triesAtStop, triesAfterStop, "no settle try once the worker stopped");
    // A try already on its way when the link closed may arrive; none is started after it.
    assert.ok(triesAfterStop <= 1, `${triesAfterStop} settle tries after the session's link closed`);
    assert.ok(
      stopTook < 4_500,
      `stop took ${stopTook} ms (a loop on the session lock alone would run to the drain's 5 s)`,
    );
    assert.equal(first.stats.throttledToRedelivery, 1, JSON.stringify(warnings));
    assert.ok(
      warnings.some((w) => /its session's link closed or its lock ended/.test(w)),
      `the message is said to be left to the broker: ${JSON.stringify(warnings)}`,
    );
    assert.equal(first.stats.committed, 1);
    fixture.broker.throttle({});
    worker = startTestWorker({
      client,
      db,
      queue: LONG_QUEUE,
      consumer: "closed",
      handlers: [stepHandler(calls)],
      sessions: { maxSessions: 1, idleMs: 500 },
    });
    await waitUntil(
      () => {
        const c = fixture.broker.counts(LONG_QUEUE);
        return c.active + c.locked === 0;
      },
      "the session drained by the next worker",
      45_000,
    );
    assert.deepEqual(calls.get(session), [[0, 0]], "applied once, at its first delivery");
    assert.equal(worker.stats.duplicate, 1, "the redelivery completed as an inbox duplicate");
    assert.equal(fixture.broker.counts(LONG_QUEUE).deadLettered, 0);
    process.stdout.write(
      `      stop with a throttled settlement took ${stopTook} ms; settle tries after the link closed: ${triesAfterStop}\n`,
    );
  });
});
