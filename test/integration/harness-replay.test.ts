/**
 * `harness.replay(id)` replays a dead-lettered message as `sbinbox dlq replay --id` does (a copy carrying the
 * original inbox key), and the worker's hint on a handler's plain `Error`, retried as transient: logged once per
 * message type, naming DoNotRetryError and RetryAfterError, however many retries follow.
 */
import assert from "node:assert/strict";
import { z } from "zod";
import { DoNotRetryError, type TransactionalHandler } from "../../src/index.ts";
import { startHarness, type Harness } from "../../src/testing/index.ts";
import { capturedLogs } from "../helpers/logs.ts";

const MODULE = "./test/fixtures/memo-handlers/index.ts";

describe("the harness's replay, and the hint on a plain Error", function () {
  this.timeout(60_000);
  let harness: Harness;
  const logs = capturedLogs();
  // Refuses its memo until the test "fixes" it, as a handler refuses input a deployment later accepts.
  let refusing = true;
  const guarded: TransactionalHandler<{ memoId: number; text: string }> = {
    kind: "transactional",
    type: "GuardedMemo",
    schema: z.object({ memoId: z.number().int().positive(), text: z.string() }),
    async handle(body, tx) {
      if (refusing) throw new DoNotRetryError("not yet");
      await tx.query("INSERT INTO memos (memo_id, text) VALUES ($1, $2)", [body.memoId, body.text]);
    },
  };
  const plain = (type: string): TransactionalHandler<{ n: number }> => ({
    kind: "transactional",
    type,
    schema: z.object({ n: z.number() }),
    handle: () => Promise.reject(new Error("the input is wrong")),
  });
  before(async () => {
    harness = await startHarness({
      module: MODULE,
      handlers: [guarded, plain("PlainFailure"), plain("OtherPlainFailure")],
      logger: logs.logger,
      // Two retries in place, then dead-lettered: the hint must not repeat on them.
      retry: { transientDelaysMs: [50, 50] },
    });
  });
  after(async () => {
    await harness?.stop();
  });

  it("replays a dead-lettered message; the copy commits under the original's MessageId", async () => {
    const id = await harness.publish("GuardedMemo", "g-1", { memoId: 41, text: "replayed" });
    const first = await harness.outcome(id);
    assert.equal(first.status === "dead-lettered" && first.reason, "NotRetryable");
    refusing = false;
    const replayed = await harness.replay(id);
    assert.equal(replayed.length, 1);
    assert.equal(replayed[0]!.messageId, id);
    assert.notEqual(replayed[0]!.copyMessageId, id, "the copy has a MessageId of its own");
    assert.equal((await harness.outcome(id)).status, "committed");
    const { rows } = await harness.db.query("SELECT text FROM memos WHERE memo_id = 41");
    assert.deepEqual(rows, [{ text: "replayed" }]);
    await assert.rejects(harness.replay(id), /no dead-lettered message has MessageId or inbox key/);
  });

  it("a replay whose copy is dead-lettered again returns with that one copy, not a loop of copies", async () => {
    refusing = true;
    const id = await harness.publish("GuardedMemo", "g-2", { memoId: 42, text: "still refused" });
    assert.equal((await harness.outcome(id)).status, "dead-lettered");
    // The worker dead-letters the copy again at once (same inbox key); the replay acts on what it planned only.
    const replayed = await harness.replay(id);
    assert.equal(replayed.length, 1);
    // The copy is dead-lettered again before the second replay looks for it, not while it is still on its way.
    assert.equal((await harness.outcome(id)).status, "dead-lettered");
    const again = await harness.replay(id);
    assert.equal(again.length, 1, "the second replay finds the first copy, dead-lettered again, and only it");
    assert.notEqual(again[0]!.copyMessageId, replayed[0]!.copyMessageId);
    refusing = false;
  });

  it("hints once per message type that a plain Error is retried as transient", async () => {
    const ids = [
      await harness.publish("PlainFailure", "p-1", { n: 1 }),
      await harness.publish("PlainFailure", "p-2", { n: 2 }),
    ];
    for (const id of ids) {
      const outcome = await harness.outcome(id);
      assert.equal(outcome.status === "dead-lettered" && outcome.reason, "RetriesExhausted");
      assert.equal(outcome.retries.length, 2);
    }
    const other = await harness.publish("OtherPlainFailure", "o-1", { n: 3 });
    assert.equal((await harness.outcome(other)).status, "dead-lettered");
    const hints = logs.lines.filter((l) => String(l.msg).includes("a handler threw a plain Error"));
    assert.deepEqual(
      hints.map((l) => l.messageType),
      ["PlainFailure", "OtherPlainFailure"],
    );
    assert.match(String(hints[0]!.msg), /DoNotRetryError.*RetryAfterError/);
    // Every retry is still logged as before: two per message.
    const retries = logs.lines.filter((l) => l.msg === "attempt failed; retrying under the lock");
    assert.equal(retries.length, 6);
    // A DoNotRetryError (the replay test's) gave no hint.
    assert.ok(!hints.some((l) => l.messageType === "GuardedMemo"));
  });
});
