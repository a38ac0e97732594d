import assert from "node:assert/strict";
import type { Database } from "../../src/app/database.ts";
import type { ProcessOutcome } from "../../src/domain/outcome.ts";
import type { SqlExecutor } from "../../src/domain/sql.ts";
import { Batcher } from "../../src/worker/batcher.ts";
import { waitUntil } from "../helpers/broker.ts";
import { recordingBatches } from "../helpers/recording-batches.ts";
import { exampleDatabase } from "../helpers/worker.ts";

const CONSUMER = "no-wait";
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * The batcher with no wait of its own (SBINBOX_BATCH_WAIT_MS=0, the default) on the embedded PostgreSQL: a message
 * that finds a transaction free runs at once, and a batch forms from what arrives while the transactions run.
 */
describe("group commit with no wait: a batch forms from what arrives while transactions run (PostgreSQL)", function () {
  this.timeout(30_000);
  let db: Database & { url: string };
  before(async () => {
    db = await exampleDatabase("batcher_no_wait");
  });
  // A failed assertion leaves handlers waiting: released, so that their transactions end and the pool closes.
  const releases: (() => void)[] = [];
  afterEach(() => {
    for (const release of releases.splice(0)) release();
  });
  after(async () => {
    await db.close();
  });

  /** A handler that writes its credit row and then waits for the test's word; `started` once it has written. */
  function held(id: string, account: string) {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const state = { started: false, release };
    releases.push(release);
    const work = async (tx: SqlExecutor): Promise<void> => {
      await tx.query("INSERT INTO example_credits (account_id, amount, message_id) VALUES ($1, 1, $2)", [
        account,
        id,
      ]);
      state.started = true;
      await released;
    };
    return { state, work };
  }

  function batcher(maxInFlight: number) {
    const recorded = recordingBatches(db.store);
    const b = new Batcher({ store: recorded.store, consumer: CONSUMER, maxSize: 8, waitMs: 0, maxInFlight });
    return { b, sizes: recorded.sizes };
  }

  async function creditsOf(ids: string[]): Promise<number> {
    const { rows } = await db.sql.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM example_credits WHERE message_id = ANY($1)",
      [ids],
    );
    return Number(rows[0]!.n);
  }

  it("unkeyed: the first message runs at once alone; those arriving meanwhile run as one batch after it", async function () {
    const { b, sizes } = batcher(4);
    const first = held("u-0", "u");
    const outcomes: Promise<ProcessOutcome>[] = [
      b.process({ messageId: "u-0", consumer: CONSUMER }, first.work),
    ];
    // One turn later the first has left: no wait of its own holds it back for company (a timer of even 1 ms would
    // still be pending, and the next message would join it).
    await turn();
    const later = ["u-1", "u-2", "u-3", "u-4"].map((id) => ({ id, ...held(id, "u") }));
    for (const m of later) {
      outcomes.push(b.process({ messageId: m.id, consumer: CONSUMER }, m.work));
      await turn();
    }
    await waitUntil(() => first.state.started, "the first message's handler ran");
    // An unkeyed transaction runs with none beside it: the four wait, whatever the slots.
    assert.deepEqual(
      later.map((m) => m.state.started),
      [false, false, false, false],
      "nothing ran beside the unkeyed one",
    );
    first.state.release();
    for (const m of later) m.state.release();
    const settled = await Promise.all(outcomes);
    assert.deepEqual(
      settled.map((o) => o.kind),
      ["committed", "committed", "committed", "committed", "committed"],
    );
    assert.deepEqual(sizes, [4], "the four that came meanwhile ran as one batch; the first went alone");
    assert.equal(await creditsOf(["u-0", "u-1", "u-2", "u-3", "u-4"]), 5);
  });

  it("keyed: each slot takes a message at once; what arrives while every slot is busy forms the next batch", async function () {
    const { b, sizes } = batcher(2);
    const a = held("k-a", "a");
    const c = held("k-b", "b");
    const outcomes: Promise<ProcessOutcome>[] = [];
    outcomes.push(b.process({ messageId: "k-a", consumer: CONSUMER }, a.work, { keys: ["a"] }));
    await turn();
    outcomes.push(b.process({ messageId: "k-b", consumer: CONSUMER }, c.work, { keys: ["b"] }));
    await waitUntil(() => a.state.started && c.state.started, "two keys, two slots: both ran at once");
    const later = ["c", "d", "e"].map((key) => ({ id: `k-${key}`, key, ...held(`k-${key}`, key) }));
    for (const m of later) {
      outcomes.push(b.process({ messageId: m.id, consumer: CONSUMER }, m.work, { keys: [m.key] }));
      await turn();
    }
    assert.ok(
      later.every((m) => !m.state.started),
      "both slots busy: the three wait",
    );
    a.state.release();
    for (const m of later) m.state.release();
    await waitUntil(() => later.every((m) => m.state.started), "the three ran");
    assert.deepEqual(sizes, [3], "the three ran as one batch in the slot freed first");
    c.state.release();
    const settled = await Promise.all(outcomes);
    assert.ok(settled.every((o) => o.kind === "committed"));
    assert.equal(await creditsOf(["k-a", "k-b", "k-c", "k-d", "k-e"]), 5);
  });

  it("keyed: a batch waiting in line for a key in flight does not hold back a message of a free key", async function () {
    // Found in review: the first version formed nothing while any batch waited in line, so c waited for a1's end.
    const { b } = batcher(4);
    const a1 = held("b-a1", "a");
    const a2 = held("b-a2", "a");
    const c = held("b-c", "c");
    const outcomes: Promise<ProcessOutcome>[] = [];
    outcomes.push(b.process({ messageId: "b-a1", consumer: CONSUMER }, a1.work, { keys: ["a"] }));
    await waitUntil(() => a1.state.started, "the first message of a runs");
    outcomes.push(b.process({ messageId: "b-a2", consumer: CONSUMER }, a2.work, { keys: ["a"] }));
    await waitUntil(() => b.queued > 0, "a's second message waits in line");
    assert.equal(b.queued, 1, "a's second message waits in line for key a");
    outcomes.push(b.process({ messageId: "b-c", consumer: CONSUMER }, c.work, { keys: ["c"] }));
    await waitUntil(() => c.state.started, "c (a free key, slots free) started while a's first message ran");
    assert.equal(a2.state.started, false, "a's second message still waits behind its first");
    a1.state.release();
    a2.state.release();
    c.state.release();
    const settled = await Promise.all(outcomes);
    assert.deepEqual(
      settled.map((o) => o.kind),
      ["committed", "committed", "committed"],
    );
    assert.equal(await creditsOf(["b-a1", "b-a2", "b-c"]), 3);
  });

  it("keyed: a batch that fills while every slot is busy waits in line, then runs whole; what comes after forms the next", async function () {
    const { b, sizes } = batcher(2);
    const busy = ["f-a", "f-b"].map((id, i) => ({ id, key: `busy-${i}`, ...held(id, `busy-${i}`) }));
    const outcomes: Promise<ProcessOutcome>[] = [];
    for (const m of busy) {
      outcomes.push(b.process({ messageId: m.id, consumer: CONSUMER }, m.work, { keys: [m.key] }));
      await turn();
    }
    await waitUntil(() => busy.every((m) => m.state.started), "both slots taken");
    // Eight more fill a batch (the batcher's size) with no slot free: it waits in line; a ninth starts the next one.
    const filling = Array.from({ length: 9 }, (_, i) => ({
      id: `f-${i}`,
      key: `f-${i}`,
      ...held(`f-${i}`, `f-${i}`),
    }));
    for (const m of filling) {
      outcomes.push(b.process({ messageId: m.id, consumer: CONSUMER }, m.work, { keys: [m.key] }));
      await turn();
    }
    assert.equal(b.queued, 1, "the full batch waits in line");
    assert.ok(
      filling.every((m) => !m.state.started),
      "nothing starts while both slots are busy",
    );
    busy[0]!.state.release();
    await waitUntil(() => filling.slice(0, 8).every((m) => m.state.started), "the eight ran");
    assert.deepEqual(sizes, [8], "the eight ran as one batch in the freed slot");
    assert.equal(filling[8]!.state.started, false, "the ninth waits for a slot");
    for (const m of filling) m.state.release();
    busy[1]!.state.release();
    const settled = await Promise.all(outcomes);
    assert.ok(settled.every((o) => o.kind === "committed"));
    assert.equal(await creditsOf([...busy, ...filling].map((m) => m.id)), 11);
  });

  it("a stop (flush) while every slot is busy: what is pending forms a batch at once and runs in the first slot freed; nothing stranded", async function () {
    const { b, sizes } = batcher(2);
    const busy = ["s-a", "s-b"].map((id, i) => ({
      id,
      key: `stop-busy-${i}`,
      ...held(id, `stop-busy-${i}`),
    }));
    const outcomes: Promise<ProcessOutcome>[] = [];
    for (const m of busy) {
      outcomes.push(b.process({ messageId: m.id, consumer: CONSUMER }, m.work, { keys: [m.key] }));
      await turn();
    }
    await waitUntil(() => busy.every((m) => m.state.started), "both slots taken");
    const pending = ["s-0", "s-1", "s-2"].map((id) => ({ id, ...held(id, id) }));
    for (const m of pending) {
      outcomes.push(b.process({ messageId: m.id, consumer: CONSUMER }, m.work, { keys: [m.id] }));
      await turn();
    }
    // Without the stop they would keep gathering until a batch ends; the stop forms them now.
    assert.equal(b.queued, 0, "three pending, no batch formed yet");
    b.flush();
    assert.equal(b.queued, 1, "the stop formed the three into a batch, waiting in line for a slot");
    const after = held("s-3", "s-3");
    outcomes.push(b.process({ messageId: "s-3", consumer: CONSUMER }, after.work, { keys: ["s-3"] }));
    await turn();
    busy[0]!.state.release();
    await waitUntil(() => pending.every((m) => m.state.started), "the three ran in the freed slot");
    assert.deepEqual(
      sizes,
      [3],
      "the three ran as one batch; the one that came after the stop was not in it",
    );
    for (const m of pending) m.state.release();
    await waitUntil(() => after.state.started, "the one after the stop ran too");
    after.state.release();
    busy[1]!.state.release();
    const settled = await Promise.all(outcomes);
    assert.deepEqual(
      settled.map((o) => o.kind),
      ["committed", "committed", "committed", "committed", "committed", "committed"],
    );
    assert.equal(await creditsOf([...busy.map((m) => m.id), ...pending.map((m) => m.id), "s-3"]), 6);
  });
});
