/**
 * A two-phase message dead-lettered after its claim was taken gives the claim up, so `sbinbox dlq replay` applies
 * it at once: before, the replay found its own message's claim "busy" on every attempt until the sweeper freed it
 * (5 min by default), with a message blaming another instance that did not exist.
 */
import assert from "node:assert/strict";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import { DoNotRetryError } from "../../src/domain/errors.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { replayDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";
import { insertMarker } from "../helpers/inbox-rows.ts";

const QUEUE = "twophase-replay";

describe("worker: a dead-lettered two-phase message and its claim", function () {
  this.timeout(30_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));
  let db: Database;
  before(async () => {
    db = await exampleDatabase("two_phase_replay");
  });
  after(async () => {
    await db.close();
  });

  async function openClaims(messageId: string): Promise<number> {
    const { rows } = await db.sql.query<{ n: number }>(
      'SELECT count(*)::integer AS n FROM "InboxMarkers" WHERE "MessageId" = $1 AND NOT "Processed"',
      [messageId],
    );
    return rows[0]!.n;
  }

  it("is released when the message is dead-lettered, so a replay performs and commits at once", async () => {
    let refuse = true;
    const keys: string[] = [];
    const handler: MessageHandler = {
      kind: "two-phase",
      type: "Ship",
      schema: z.object({ orderId: z.string() }),
      perform(_body, context) {
        keys.push(context.idempotencyKey);
        if (refuse) return Promise.reject(new DoNotRetryError("the carrier refused the address"));
        return Promise.resolve();
      },
    };
    await sendRawMessages(fixture.client, QUEUE, [
      { messageId: "ship-1", subject: "Ship", body: Buffer.from('{"orderId":"o-1"}') },
    ]);
    // The sweeper is off (startTestWorker): only the release can free the claim.
    const worker = startTestWorker({ client: fixture.client, db, queue: QUEUE, handlers: [handler] });
    try {
      await waitUntil(() => worker.stats.settled === 1, "the first delivery is dead-lettered");
      assert.equal(worker.stats.retriesExhausted, 1);
      assert.equal(await openClaims("ship-1"), 0, "the dead-lettered message's claim is still open");
      refuse = false;
      const { replayed } = await replayDeadLetters(fixture.client, QUEUE, (m) => m.messageId === "ship-1");
      assert.equal(replayed.length, 1);
      await waitUntil(() => worker.stats.settled === 2, "the replay is settled");
    } finally {
      await worker.stop();
    }
    assert.equal(worker.stats.committed, 1, "the replay committed on its first attempt");
    assert.equal(worker.stats.failed, 1, "only the refused delivery failed");
    assert.deepEqual(keys, ["ship-1", "ship-1"], "both performs carried the original MessageId as key");
    const { rows } = await db.sql.query<{ processed: boolean }>(
      'SELECT "Processed" AS processed FROM "InboxMarkers" WHERE "MessageId" = $1',
      ["ship-1"],
    );
    assert.deepEqual(rows, [{ processed: true }]);
    assert.equal((await takeDeadLetters(fixture.client, QUEUE)).length, 0);
  });

  it("a claim that is really held is busy, and the error says what holds it", async () => {
    // An open claim of another delivery, as one performing elsewhere leaves it.
    await insertMarker(db.sql, "ship-2", "test", true);
    const handler: MessageHandler = {
      kind: "two-phase",
      type: "Ship",
      schema: z.object({ orderId: z.string() }),
      perform: () => Promise.resolve(),
    };
    await sendRawMessages(fixture.client, QUEUE, [
      { messageId: "ship-2", subject: "Ship", body: Buffer.from('{"orderId":"o-2"}') },
    ]);
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: QUEUE,
      handlers: [handler],
      // One failure is enough to read its error: dead-letter at once.
      retryPolicy: {
        transientDelaysMs: [],
        permanentDelaysMs: [],
        jitter: 0,
        maxInProcessWaitMs: 0,
        lockMarginMs: 0,
      },
    });
    try {
      await waitUntil(() => worker.stats.settled === 1, "the busy delivery is settled");
    } finally {
      await worker.stop();
    }
    const [dead] = await takeDeadLetters(fixture.client, QUEUE, 1, 2_000);
    assert.equal(dead?.deadLetterReason, "RetriesExhausted");
    assert.match(String(dead?.deadLetterErrorDescription), /ClaimBusyError/);
    assert.match(
      String(dead?.deadLetterErrorDescription),
      /open two-phase claim that another delivery of it took/,
    );
    assert.equal(await openClaims("ship-2"), 1, "another delivery's claim is left alone");
  });
});
