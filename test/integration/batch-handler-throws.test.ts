import assert from "node:assert/strict";
import type { Database } from "../../src/app/database.ts";
import { RetryAfterError } from "../../src/domain/errors.ts";
import type { ProcessOutcome } from "../../src/domain/outcome.ts";
import type { SqlExecutor } from "../../src/domain/sql.ts";
import { ACCOUNT_CREDITED } from "../../src/example/index.ts";
import { exampleModule } from "../../src/example/module.ts";
import { startHarness, type Harness } from "../../src/testing/harness.ts";
import { Batcher } from "../../src/worker/batcher.ts";
import { recordingBatches } from "../helpers/recording-batches.ts";
import { exampleDatabase } from "../helpers/worker.ts";

const CONSUMER = "throws";

/**
 * A handler that throws of its own accord in a batch (no statement of its failed): the failure is its message's, as
 * alone, so it is not run again alone at once; its retry policy judges the error (a RetryAfterError's delay, the
 * attempt count). Found by the review of batching on by default: the rerun alone used to swallow such a failure.
 */
describe("a handler that throws in a batch fails as it would alone (real PostgreSQL)", function () {
  this.timeout(60_000);
  let db: Database & { url: string };
  before(async () => {
    db = await exampleDatabase("batch_handler_throws");
  });
  after(async () => {
    await db.close();
  });

  async function creditsOf(ids: string[]): Promise<number> {
    const { rows } = await db.sql.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM example_credits WHERE message_id = ANY($1)",
      [ids],
    );
    return Number(rows[0]!.n);
  }

  for (const keyed of [true, false])
    it(`${keyed ? "keyed, side by side" : "unkeyed, one after another"}: the thrower fails with its RetryAfterError, run once; the others commit once`, async function () {
      const recorded = recordingBatches(db.store);
      const b = new Batcher({ store: recorded.store, consumer: CONSUMER, maxSize: 4, waitMs: 0 });
      const calls = new Map<string, number>();
      const ids = [0, 1, 2, 3].map((i) => `t-${keyed}-${i}`);
      const work = (id: string) => async (tx: SqlExecutor) => {
        calls.set(id, (calls.get(id) ?? 0) + 1);
        await tx.query("INSERT INTO example_credits (account_id, amount, message_id) VALUES ($1, 1, $2)", [
          id,
          id,
        ]);
        if (id === ids[1]) throw new RetryAfterError(750, "the downstream said: come back in 750 ms");
      };
      // Four in one turn: the batch is full at the fourth and runs as one.
      const outcomes: Promise<ProcessOutcome>[] = ids.map((id) =>
        b.process({ messageId: id, consumer: CONSUMER }, work(id), {
          firstDelivery: true,
          ...(keyed ? { keys: [id] } : {}),
        }),
      );
      const settled = await Promise.all(outcomes);
      assert.deepEqual(recorded.sizes, [4], "one batch of four");
      assert.deepEqual(
        settled.map((o) => o.kind),
        ["committed", "failed", "committed", "committed"],
      );
      const thrown = settled[1]!;
      assert.ok(
        thrown.kind === "failed" && thrown.error instanceof RetryAfterError,
        JSON.stringify({ kind: thrown.kind }),
      );
      assert.equal(thrown.errorClass, "permanent", "a handler's own error: the retry policy reads it");
      assert.equal(calls.get(ids[1]!), 1, "the thrower was not run again alone");
      assert.equal(
        await creditsOf(ids),
        3,
        "the others committed once each, alone; the thrower's write rolled back",
      );
    });

  describe("through the team harness, with the default batching", function () {
    let harness: Harness;
    before(async () => {
      harness = await startHarness({ module: exampleModule });
    });
    after(async () => {
      await harness?.stop();
    });

    it("a credit whose handler fails its first call shows one retry, as with batches off", async function () {
      // The review's case: a team's test of "a transient failure is retried" saw no retry once batches were on.
      const ids = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          harness.publish(ACCOUNT_CREDITED, `h-${i}`, {
            accountId: `harness-${i}`,
            amount: 1,
            ...(i === 3 ? { failOnce: true } : {}),
          }),
        ),
      );
      const out = await harness.outcome(ids[3]!);
      assert.equal(out.status, "committed");
      assert.equal(out.retries.length, 1, JSON.stringify(out));
      // outcome() hands each outcome out once: the others', not the thrower's again.
      for (const id of ids.filter((_, i) => i !== 3))
        assert.equal((await harness.outcome(id)).status, "committed");
    });
  });
});
