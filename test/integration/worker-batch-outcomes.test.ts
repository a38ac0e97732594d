import assert from "node:assert/strict";
import type { Database } from "../../src/app/database.ts";
import type { ProcessOutcome } from "../../src/domain/outcome.ts";
import type { SqlExecutor } from "../../src/domain/sql.ts";
import { accountSql } from "../../src/example/index.ts";
import { Batcher, type BatchOutcome } from "../../src/worker/batcher.ts";
import { waitUntil } from "../helpers/broker.ts";
import { creditsPerMessage, exampleDatabase } from "../helpers/worker.ts";

const CONSUMER = "deadlock";

/**
 * Two batches of the example's credits touching the same two accounts in opposite orders (x then y, y then x),
 * the order a message-at-a-time worker never holds two row locks in. Each batch's first handler, once it holds
 * its account's row, waits until the other batch's first handler holds the other's, or until the batcher says
 * the other batch is queued behind it: so when both run at once, each then waits for the other's row, a
 * deadlock every time, and when they cannot run at once, nothing waits.
 */
describe("group commit: two batches over the same rows in opposite orders (real PostgreSQL)", function () {
  this.timeout(60_000);
  let db: Database & { url: string };

  beforeEach(async function () {
    db = await exampleDatabase(`batch_deadlock_${this.currentTest?.title.slice(0, 10).replace(/\W/g, "_")}`);
  });
  afterEach(async () => {
    await db.close();
  });

  /**
   * Batches a-1/a-2 and b-1/b-2 over accounts x, y; `keys` names each message's keys (none: unkeyed). With
   * `workers: 2` the two batches go to two batchers on the one database, as two worker instances would.
   */
  async function run(
    maxInFlight: number | undefined,
    keys: (id: string, account: string) => readonly string[] | undefined = () => undefined,
    workers: 1 | 2 = 1,
  ) {
    const outcomes: BatchOutcome[] = [];
    const batchers = Array.from(
      { length: workers },
      () =>
        new Batcher({
          store: db.store,
          consumer: CONSUMER,
          maxSize: 2,
          waitMs: 60_000,
          ...(maxInFlight === undefined ? {} : { maxInFlight }),
          onBatch: (_size, outcome) => outcomes.push(outcome),
        }),
    );
    let holding = 0;
    const credit =
      (id: string, account: string, first: boolean) =>
      async (tx: SqlExecutor): Promise<void> => {
        await tx.query(accountSql.addToBalance.postgres, [account, 1]);
        await tx.query(accountSql.insertCredit.postgres, [id, account, 1]);
        if (first) {
          holding += 1;
          await waitUntil(
            () => holding >= 2 || batchers.some((b) => b.queued > 0),
            "the other batch holds its row or waits",
          );
        }
      };
    const messages: [string, string, boolean][] = [
      ["a-1", "x", true],
      ["a-2", "y", false],
      ["b-1", "y", true],
      ["b-2", "x", false],
    ];
    const settled: Promise<ProcessOutcome>[] = messages.map(([id, account, first], i) => {
      const given = keys(id, account);
      return batchers[i < 2 ? 0 : workers - 1]!.process(
        { messageId: id, consumer: CONSUMER },
        credit(id, account, first),
        given === undefined ? {} : { keys: given },
      );
    });
    const results = await Promise.all(settled);
    return { outcomes, results, ids: messages.map(([id]) => id) };
  }

  async function assertOneEffectEach(ids: string[]): Promise<void> {
    const perMessage = await creditsPerMessage(db);
    for (const id of ids) assert.equal(perMessage.get(id), 1, id);
    const { rows } = await db.sql.query<{ account_id: string; balance: number }>(
      "SELECT account_id, balance::int AS balance FROM example_accounts ORDER BY account_id",
    );
    assert.deepEqual(
      rows.map((r) => [r.account_id, Number(r.balance)]),
      [
        ["x", 2],
        ["y", 2],
      ],
    );
  }

  const allCommitted = ["committed", "committed", "committed", "committed"];

  it("unkeyed, with the default in flight: their batches still run one at a time: no deadlock, both commit whole", async function () {
    const { outcomes, results, ids } = await run(undefined);
    assert.deepEqual(outcomes, ["committed", "committed"]);
    assert.deepEqual(
      results.map((r) => r.kind),
      allCommitted,
    );
    await assertOneEffectEach(ids);
  });

  it("keyed by the accounts they touch, two in flight: the second batch shares a key and waits: no deadlock", async function () {
    const { outcomes, results, ids } = await run(2, (_id, account) => [`account:${account}`]);
    assert.deepEqual(outcomes, ["committed", "committed"]);
    assert.deepEqual(
      results.map((r) => r.kind),
      allCommitted,
    );
    await assertOneEffectEach(ids);
  });

  it("keys that do not name the rows touched (the sender, not the account), two in flight: they deadlock; the victim's messages commit alone, once each", async function () {
    // a-1 and a-2 share a key, so they run in turn in their batch, as b-1 and b-2 do in theirs; the batches' keys
    // are disjoint, so both run at once, and meet on the accounts.
    const { outcomes, results, ids } = await run(2, (id) => [`sender:${id.slice(0, 1)}`]);
    assert.deepEqual([...outcomes].sort(), ["committed", "deadlock"]);
    assert.deepEqual(
      results.map((r) => r.kind),
      allCommitted,
    );
    await assertOneEffectEach(ids);
  });

  it("unkeyed, in two workers' batches on one database: they deadlock; the victim is counted and its messages commit alone, once each", async function () {
    const { outcomes, results, ids } = await run(undefined, undefined, 2);
    assert.deepEqual([...outcomes].sort(), ["committed", "deadlock"]);
    assert.deepEqual(
      results.map((r) => r.kind),
      allCommitted,
    );
    await assertOneEffectEach(ids);
  });
});

describe("group commit: a batch whose messages the pre-check finds all done (real PostgreSQL)", function () {
  let db: Database & { url: string };
  before(async () => {
    db = await exampleDatabase("batch_all_done");
  });
  after(async () => {
    await db.close();
  });

  it("opens no transaction and is counted as all_duplicate, not as a committed one", async function () {
    const outcomes: BatchOutcome[] = [];
    const batcher = new Batcher({
      store: db.store,
      consumer: CONSUMER,
      maxSize: 2,
      waitMs: 60_000,
      onBatch: (_size, outcome) => outcomes.push(outcome),
    });
    const work = (id: string) => (tx: SqlExecutor) =>
      tx.query(accountSql.insertCredit.postgres, [id, "z", 1]).then(() => undefined);
    const send = () =>
      Promise.all(
        ["d-1", "d-2"].map((id) => batcher.process({ messageId: id, consumer: CONSUMER }, work(id))),
      );
    const first = await send();
    assert.deepEqual(
      first.map((r) => r.kind),
      ["committed", "committed"],
    );
    const again = await send();
    assert.deepEqual(
      again.map((r) => r.kind),
      ["duplicate", "duplicate"],
    );
    assert.deepEqual(outcomes, ["committed", "all_duplicate"]);
    const perMessage = await creditsPerMessage(db);
    assert.equal(perMessage.get("d-1"), 1);
    assert.equal(perMessage.get("d-2"), 1);
  });
});
