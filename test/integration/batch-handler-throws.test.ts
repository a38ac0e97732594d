import assert from "node:assert/strict";
import { openDatabase, type Database } from "../../src/app/database.ts";
import { moduleMigrations } from "../../src/app/handler-module.ts";
import { RetryAfterError } from "../../src/domain/errors.ts";
import type { ProcessOutcome } from "../../src/domain/outcome.ts";
import type { SqlExecutor } from "../../src/domain/sql.ts";
import { ACCOUNT_CREDITED } from "../../src/example/index.ts";
import { exampleModule } from "../../src/example/module.ts";
import { startHarness } from "../../src/testing/harness.ts";
import { Batcher } from "../../src/worker/batcher.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { recordingBatches } from "../helpers/recording-batches.ts";

const CONSUMER = "throws";

/**
 * A handler that throws of its own accord in a batch (no statement of its failed): the failure is its message's, as
 * alone, so it is not run again alone at once; its retry policy judges the error (a RetryAfterError's delay, the
 * attempt count). Found by the reviews of batching on by default: the rerun alone used to swallow such a failure,
 * first every one of them, then (the second review) every one but the batch's first.
 */
describe("a handler that throws in a batch fails as it would alone (real PostgreSQL)", function () {
  this.timeout(60_000);
  let db: Database;
  before(async () => {
    // The worker's default pre-check (redeliveries): first deliveries are not read for, so handlers start early.
    db = await openDatabase(
      { kind: "postgres", url: await createTestDatabase("batch_handler_throws") },
      { preCheck: "redeliveries", maxConnections: 20 },
    );
    await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
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

  /** n keyed credits in one batch; each then does `behave`. */
  function run(prefix: string, behave: (id: string, tx: SqlExecutor) => Promise<void> | void, n = 4) {
    const recorded = recordingBatches(db.store);
    const b = new Batcher({ store: recorded.store, consumer: CONSUMER, maxSize: n, waitMs: 0 });
    const calls = new Map<string, number>();
    const ids = Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
    const outcomes: Promise<ProcessOutcome>[] = ids.map((id) =>
      b.process(
        { messageId: id, consumer: CONSUMER },
        async (tx) => {
          calls.set(id, (calls.get(id) ?? 0) + 1);
          await tx.query("INSERT INTO example_credits (account_id, amount, message_id) VALUES ($1, 1, $2)", [
            id,
            id,
          ]);
          await behave(id, tx);
        },
        { firstDelivery: true, keys: [id] },
      ),
    );
    return { ids, calls, recorded, all: Promise.all(outcomes) };
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

  it("two handlers side by side both throw RetryAfterError: each is its message's failure, each run once", async function () {
    const { ids, calls, recorded, all } = run("two", (id) => {
      if (id.endsWith("-1") || id.endsWith("-2"))
        throw new RetryAfterError(30_000, `downstream down (${id})`);
    });
    const settled = await all;
    assert.deepEqual(recorded.sizes, [4]);
    assert.deepEqual(
      settled.map((o) => o.kind),
      ["committed", "failed", "failed", "committed"],
    );
    assert.deepEqual(
      ids.map((id) => calls.get(id)),
      [2, 1, 1, 2],
      "each thrower called once in this attempt (as alone); the others once in the batch and once alone",
    );
  });

  it("a handler throws of its own accord after another's statement failed first: its failure is still its own", async function () {
    const { ids, calls, all } = run("mixed", async (id, tx) => {
      if (id.endsWith("-0")) await tx.query("SELECT * FROM no_such_table_at_all");
      if (id.endsWith("-2")) {
        await new Promise((r) => setTimeout(r, 50));
        throw new RetryAfterError(30_000, "downstream down");
      }
    });
    const settled = await all;
    assert.equal(settled[2]!.kind, "failed");
    assert.equal(calls.get(ids[2]!), 1, "the thrower's attempt ran its handler once, as alone");
  });

  it("early start, a first delivery whose marker exists: the duplicate is decided, and the thrower keeps its own failure", async function () {
    // A marker for the batch's first message, left by an earlier delivery.
    const dup = "early-0";
    assert.equal(
      (await db.store.process({ messageId: dup, consumer: CONSUMER }, () => Promise.resolve())).kind,
      "committed",
    );
    const { ids, calls, recorded, all } = run("early", (id) => {
      if (id.endsWith("-1")) throw new RetryAfterError(30_000, "downstream down");
    });
    const settled = await all;
    assert.equal(
      recorded.batches[0]?.result.reason,
      "duplicate",
      JSON.stringify(recorded.batches[0]?.result),
    );
    assert.equal(settled[0]!.kind, "duplicate");
    assert.equal(settled[1]!.kind, "failed");
    assert.equal(calls.get(ids[1]!), 1, "the thrower's attempt ran its handler once, as alone");
  });
});

describe("a handler that fails its first call, through the team harness: one retry each, batches on or off", function () {
  this.timeout(60_000);
  for (const batchSize of [1, "auto"] as const)
    it(`batchSize ${batchSize}: eight failOnce credits each show one retry`, async function () {
      // The review's case: a team's test of "a transient failure is retried" saw none once batches were on.
      const harness = await startHarness({ module: exampleModule, batchSize });
      try {
        const ids = await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            harness.publish(ACCOUNT_CREDITED, `h-${i}`, {
              accountId: `harness-${i}`,
              amount: 1,
              failOnce: true,
            }),
          ),
        );
        const retries: number[] = [];
        for (const id of ids) retries.push((await harness.outcome(id)).retries.length);
        assert.deepEqual(retries, [1, 1, 1, 1, 1, 1, 1, 1], "retries shown per message");
      } finally {
        await harness.stop();
      }
    });
});
