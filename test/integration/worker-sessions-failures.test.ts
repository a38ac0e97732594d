import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { z } from "zod";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { localConnectionString } from "../../src/localbroker/broker.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { StallProxy } from "../helpers/stall-proxy.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

/** One step of an account; `fail` may refuse it for now (the handler then throws a transient error). */
function stepHandler(
  fail: (account: string, deliveryCount: number) => boolean,
  tried: { account: string; deliveryCount: number; at: number }[],
  done: string[],
): MessageHandler {
  return {
    kind: "transactional",
    type: "Step",
    schema: z.object({ account: z.string(), seq: z.number() }),
    handle(body, _tx, context) {
      const { account } = body as { account: string };
      tried.push({ account, deliveryCount: context.deliveryCount, at: Date.now() });
      if (fail(account, context.deliveryCount)) return Promise.reject(new Error("ECONNREFUSED downstream"));
      done.push(context.messageId);
      return Promise.resolve();
    },
  };
}

function step(account: string, seq: number) {
  return {
    messageId: `${account}-${seq}`,
    sessionId: account,
    subject: "Step",
    body: Buffer.from(JSON.stringify({ account, seq })),
  };
}

/** Session mode when a session is given up or the worker stops while a retry waits in place (review of issue 27). */
describe("worker in session mode: a retry wait cut short", function () {
  this.timeout(90_000);
  const fixture = useLocalBroker(
    brokerConfig({
      lost: { RequiresSession: true, LockDuration: "PT2S" },
      stop: { RequiresSession: true, LockDuration: "PT5S" },
    }),
  );

  it("a session lock lost during a retry wait: the wait ends, the message is not retried on the lost lock, the slot takes sessions again", async () => {
    const db = await exampleDatabase("sessions_lock_lost_wait");
    const tried: { account: string; deliveryCount: number; at: number }[] = [];
    const done: string[] = [];
    // A fails on its first delivery only: once the slot lets the lost session go, it is taken again and goes on.
    const handler = stepHandler(
      (account, deliveryCount) => account === "A" && deliveryCount === 0,
      tried,
      done,
    );
    const proxy = await StallProxy.start(fixture.broker.port);
    const client = new ServiceBusClient(localConnectionString(proxy.port), {
      retryOptions: { maxRetries: 0, timeoutInMs: 1_000 },
    });
    const sender = fixture.client.createSender("lost");
    await sender.sendMessages(step("A", 0));
    const worker = startTestWorker({
      client,
      db,
      queue: "lost",
      handlers: [handler],
      sessions: { maxSessions: 1, idleMs: 300 },
      retryPolicy: { ...defaultRetryPolicy, transientDelaysMs: Array<number>(14).fill(1_000), jitter: 0 },
    });
    try {
      await waitUntil(() => tried.length >= 2, "A-0 failing and waiting in place");
      proxy.stall(); // longer than the 2 s lock: the broker releases the session meanwhile
      await waitUntil(() => fixture.broker.counts("lost").locked === 0, "the session lock expired", 20_000);
      proxy.resume();
      const lostAt = Date.now();
      await sender.sendMessages(step("B", 0));
      await waitUntil(
        () => done.includes("A-0") && done.includes("B-0"),
        "A-0 taken again and B-0, by the one slot",
      );
      // At most one attempt of the first delivery may have begun before the failed renewal was answered.
      const lateFirst = tried.filter(
        (t) => t.account === "A" && t.deliveryCount === 0 && t.at > lostAt + 1_500,
      );
      assert.deepEqual(lateFirst, [], "no retry of the delivery whose session lock was lost");
      assert.ok(
        tried.some((t) => t.account === "A" && t.deliveryCount >= 1),
        `A-0 redelivered after the lock loss: ${JSON.stringify(tried)}`,
      );
    } finally {
      await worker.stop();
      await sender.close();
      await client.close();
      await proxy.close();
      await db.close();
    }
  });

  it("a stop during a retry wait leaves the message unsettled: its delivery count is not raised", async () => {
    const db = await exampleDatabase("sessions_stop_wait");
    const tried: { account: string; deliveryCount: number; at: number }[] = [];
    const handler = stepHandler(() => true, tried, []);
    const sender = fixture.client.createSender("stop");
    await sender.sendMessages([step("A", 0), step("A", 1)]);
    await sender.close();
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: "stop",
      handlers: [handler],
      sessions: { maxSessions: 1, idleMs: 300 },
      retryPolicy: { ...defaultRetryPolicy, transientDelaysMs: [10_000, 10_000], jitter: 0 },
    });
    await waitUntil(() => tried.length >= 1, "the first attempt failed");
    const stopping = worker.stop();
    await stopping;
    const receiver = await fixture.client.acceptSession("stop", "A");
    const peeked = await receiver.peekMessages(2);
    await receiver.close();
    await db.close();
    assert.deepEqual(
      peeked.map((m) => [m.messageId, m.deliveryCount]),
      [
        ["A-0", 0],
        ["A-1", 0],
      ],
      "A-0 still the session's head, no delivery spent; A-1 never taken",
    );
    assert.equal(tried.length, 1, "one attempt only");
    assert.equal(worker.stats.failed, 1);
  });
});

describe("worker without session mode on a session-enabled queue", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ sessions: { RequiresSession: true } }));

  it("stops receiving with one error naming the setting, and reports the receiver detached (readiness 503)", async () => {
    const db = await exampleDatabase("plain_on_sessions");
    const errors: string[] = [];
    const warnings: string[] = [];
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: "sessions",
      handlers: [stepHandler(() => false, [], [])],
      logger: {
        debug: () => undefined,
        info: () => undefined,
        warn: (message: string) => warnings.push(message),
        error: (message: string, fields?: Record<string, unknown>) =>
          errors.push(`${message} ${String((fields?.["error"] as Error | undefined)?.message)}`),
        child() {
          return this;
        },
      },
    });
    try {
      await waitUntil(() => errors.length > 0, "the mismatch is logged");
      assert.match(errors[0]!, /SBINBOX_MAX_CONCURRENT_SESSIONS: 0, but 'sessions' requires sessions/);
      const readiness = await worker.readiness();
      assert.equal(readiness.receiver, "detached");
      assert.equal(readiness.ready, false);
      // The SDK retried the refused link before; now nothing more is logged about it.
      const seen = warnings.filter((w) => w === "receive error").length;
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      assert.equal(
        warnings.filter((w) => w === "receive error").length,
        seen,
        "no receive errors after the stop",
      );
      assert.equal(errors.length, 1, errors.join("\n"));
    } finally {
      await worker.stop();
      await db.close();
    }
  });
});
