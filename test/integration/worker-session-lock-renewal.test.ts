import assert from "node:assert/strict";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "short-lock";

/**
 * The session lock renewed on the lock's own length: a session whose LockDuration is 1 s stays held through a
 * handler that takes 3 s, told no lock duration (taken from what the broker granted) or a longer one than the
 * entity's (the shorter wins). No other receiver can take the session meanwhile; each message is applied once, in
 * order, on its first delivery.
 */
describe("worker in session mode: the session lock renewed from the lock duration (local broker, LockDuration 1 s)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresSession: true, LockDuration: "PT1S" } }));
  let db: Database;
  let worker: Worker | undefined;
  before(async () => {
    db = await exampleDatabase("worker_session_lock_renewal");
  });
  afterEach(async () => {
    await worker?.stop();
    worker = undefined;
  });
  after(async () => {
    await db.close();
  });

  for (const configured of [undefined, 60_000]) {
    it(`holds the session through a 3 s handler (lockDurationMs ${String(configured)})`, async function () {
      const session = `s-${String(configured)}`;
      const calls: [number, number][] = [];
      let slowStarted = false;
      let slowDone: () => void = () => undefined;
      const slow = new Promise<void>((resolve) => (slowDone = resolve));
      const handler: MessageHandler = {
        kind: "transactional",
        type: "Step",
        schema: z.object({ seq: z.number() }),
        async handle(body, _tx, context) {
          const { seq } = body as { seq: number };
          calls.push([seq, context.deliveryCount]);
          if (seq === 0) {
            slowStarted = true;
            await new Promise((resolve) => setTimeout(resolve, 3_000)); // three lock durations
            slowDone();
          }
        },
      };
      const warnings: string[] = [];
      worker = startTestWorker({
        client: fixture.client,
        db,
        queue: QUEUE,
        consumer: session,
        handlers: [handler],
        sessions: { maxSessions: 1 },
        ...(configured === undefined ? {} : { lockDurationMs: configured }),
        logger: {
          debug: () => undefined,
          info: () => undefined,
          warn: (message: string) => warnings.push(message),
          error: (message: string) => warnings.push(message),
          child() {
            return this;
          },
        },
      });
      const sender = fixture.client.createSender(QUEUE);
      await sender.sendMessages(
        [0, 1, 2].map((seq) => ({
          messageId: `${session}-${seq}`,
          sessionId: session,
          subject: "Step",
          body: Buffer.from(JSON.stringify({ seq })),
        })),
      );
      await sender.close();
      await waitUntil(() => slowStarted, "the slow handler started");
      await new Promise((resolve) => setTimeout(resolve, 2_000)); // past the first lock, still in the handler
      await assert.rejects(
        fixture.client.acceptSession(QUEUE, session),
        (error: Error) => /lock|locked/i.test(error.message),
        "no other receiver can take the session while the handler runs",
      );
      await slow;
      await waitUntil(() => calls.length === 3 && worker!.inFlight === 0, "all three handled", 15_000);
      // The AMQP header's delivery count, 0 on a first delivery: a lost lock would have delivered seq 0 again.
      assert.deepEqual(calls, [
        [0, 0],
        [1, 0],
        [2, 0],
      ]);
      assert.equal(worker.stats.duplicate, 0);
      assert.deepEqual(
        warnings.filter((w) => /session given up|renewing a session lock failed/.test(w)),
        [],
      );
      assert.equal(fixture.broker.counts(QUEUE).active + fixture.broker.counts(QUEUE).locked, 0);
    });
  }
});
