import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createConsoleService } from "../../src/console/service.ts";
import { openArchive } from "../../src/servicebus/dead-letter-archive.ts";
import { peekDeadLetters, replayDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { selectorOf } from "../../src/servicebus/dead-letter-select.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";

const QUEUE = "console-long-run";
const N = 300;
const HELD = "console-long-run-held";

// A run longer than the lock: the messages it holds lose their locks mid-run.
// The broker's clock is the test's: it moves past the lock at a chosen point, so the pass ends there on any machine.
describe("sbinbox console: a replay that outlives the dead-letter queue's lock", function () {
  this.timeout(120_000);
  let offsetMs = 0;
  // Stopped while the set-up dead-letters its messages one by one: under load that outlasts the 1 s lock.
  let frozenAt: number | undefined;
  const fixture = useLocalBroker(
    brokerConfig({
      // Duplicate detection on, as on the worker's queue in Azure: the replay's resends rely on it.
      [QUEUE]: { LockDuration: "PT1S", MaxDeliveryCount: 100, RequiresDuplicateDetection: true },
      [HELD]: { LockDuration: "PT1M", MaxDeliveryCount: 100 },
    }),
    { now: () => frozenAt ?? Date.now() + offsetMs },
  );

  before(async function () {
    frozenAt = Date.now();
    try {
      await setUp();
    } finally {
      frozenAt = undefined;
    }
  });

  async function setUp(): Promise<void> {
    for (let i = 0; i < N; i += 100)
      await sendRawMessages(
        fixture.client,
        QUEUE,
        Array.from({ length: 100 }, (_, j) => ({
          messageId: `m-${i + j}`,
          subject: "X",
          body: Buffer.from("{}"),
        })),
      );
    // 100 of reason A first (one receive's page, all held back), then 200 of B.
    await deadLetterAll(QUEUE, N, (n) => (n < 100 ? "A" : "B"));
    await sendRawMessages(fixture.client, HELD, [
      { messageId: "h-0", subject: "X", body: Buffer.from("{}") },
      { messageId: "h-1", subject: "X", body: Buffer.from("{}") },
    ]);
    await deadLetterAll(HELD, 2, () => "A");
  }

  /** Dead-letters the queue's first `count` messages (m-<n>), each with the reason `reasonOf(n)`. */
  async function deadLetterAll(queue: string, count: number, reasonOf: (n: number) => string): Promise<void> {
    const receiver = fixture.client.createReceiver(queue);
    try {
      for (let moved = 0; moved < count;) {
        for (const m of await receiver.receiveMessages(100, { maxWaitTimeInMs: 2_000 })) {
          const n = Number(String(m.messageId).slice(2));
          await receiver.deadLetterMessage(m, {
            deadLetterReason: reasonOf(n),
            deadLetterErrorDescription: "x",
          });
          moved += 1;
        }
      }
    } finally {
      await receiver.close();
    }
  }

  it("a replay that outlasts the lock of the messages it holds goes on until every selected message is replayed, and the other group's delivery counts stay as they were", async function () {
    const before = new Map(
      (await peekDeadLetters(fixture.client, QUEUE)).map((m) => [m.messageId, m.deliveryCount]),
    );
    const done: string[] = [];
    const { replayed, notActed } = await replayDeadLetters(
      fixture.client,
      QUEUE,
      selectorOf({ reason: "B" }),
      {
        // Unchanged delivery counts need the opt-in: the others met on the way deferred, not abandoned.
        setAside: true,
        onProgress: (count, m) => {
          done.push(m.messageId);
          // Mid-chunk: the rest of the chunk locked with this one are past their 1 s lock now.
          if (count === 150) offsetMs += 5_000;
        },
      },
    );
    assert.equal(
      replayed.length,
      N - 100,
      `replayed ${replayed.length}; not: ${JSON.stringify([...notActed])}`,
    );
    assert.equal(new Set(done).size, N - 100);
    // The rest of that chunk had their copies sent before their completions met the lost locks; the next round sent
    // them again under the same MessageIds, which duplicate detection dropped: one copy each in the queue.
    const counts = fixture.broker.counts(QUEUE);
    assert.ok(counts.duplicatesDropped > 0, "the lost locks were met");
    assert.equal(counts.active, N - 100, "one copy of each");
    const left = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(left.filter((m) => m.reason === "B").length, 0, "no B left in the dead-letter queue");
    const a = left.filter((m) => m.reason === "A");
    assert.equal(a.length, 100, "the other group untouched");
    for (const m of a)
      assert.equal(m.deliveryCount, before.get(m.messageId), `${m.messageId}'s delivery count`);
  });

  it("says which planned messages another receiver holds, acts on the others: partial, and never reads done early", async function () {
    const dir = await mkdtemp(join(tmpdir(), "sbinbox-archive-"));
    const service = createConsoleService({
      client: fixture.client,
      entity: HELD,
      archive: (who) => openArchive(dir, HELD, who),
    });
    const plan = await service.plan("purge", { filter: { reason: "A" } }, "alice");
    assert.deepEqual(
      plan.sample.map((m) => m.messageId),
      ["h-0", "h-1"],
    );
    // Another receiver holds h-1's lock for the whole run: the run cannot reach it.
    const other = fixture.client.createReceiver(HELD, { subQueueType: "deadLetter" });
    try {
      const locked = await other.receiveMessages(2, { maxWaitTimeInMs: 2_000 });
      for (const m of locked) if (m.messageId === "h-0") await other.deferMessage(m);
      assert.ok(locked.some((m) => m.messageId === "h-1"));
      const job = service.run(plan.token, "alice");
      // Every state a poll could see, looked at on each turn of the event loop.
      const seen: string[] = [job.state];
      const deadline = Date.now() + 60_000;
      while (job.state === "running" && Date.now() < deadline) {
        await new Promise((resolve) => setImmediate(resolve));
        if (seen.at(-1) !== job.state) seen.push(job.state);
      }
      assert.deepEqual(seen, ["running", "partial"], `${job.error ?? ""} ${JSON.stringify(job.results)}`);
      assert.deepEqual(
        job.results.map((r) => [r.messageId, r.result]),
        [
          ["h-0", "purged"],
          ["h-1", "held by another operator"],
        ],
      );
    } finally {
      await other.close();
      await rm(dir, { recursive: true, force: true });
    }
    const left = await peekDeadLetters(fixture.client, HELD);
    assert.deepEqual(
      left.map((m) => m.messageId),
      ["h-1"],
    );
  });
});
