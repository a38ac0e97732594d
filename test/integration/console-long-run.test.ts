import assert from "node:assert/strict";
import { createConsoleService } from "../../src/console/service.ts";
import { peekDeadLetters, replayDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { selectorOf } from "../../src/servicebus/dead-letter-select.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";

const QUEUE = "console-long-run";
const N = 300;
const HELD = "console-long-run-held";

// A run longer than the lock: the messages held back (the other reason) come back during the run and end a pass.
// The broker's clock is the test's: it moves past the lock at a chosen point, so the pass ends there on any machine.
describe("sbinbox console: a replay that outlives the dead-letter queue's lock", function () {
  this.timeout(120_000);
  let offsetMs = 0;
  // Stopped while the set-up dead-letters its messages one by one: under load that outlasts the 1 s lock.
  let frozenAt: number | undefined;
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT1S", MaxDeliveryCount: 100 },
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

  it("goes on in passes when the held messages' locks run out mid-run, until every selected message is replayed", async function () {
    const done: string[] = [];
    const { replayed } = await replayDeadLetters(fixture.client, QUEUE, selectorOf({ reason: "B" }), {
      onProgress: (count, m) => {
        done.push(m.messageId);
        // After the first page of B: the 100 A held since the first page are past their 1 s lock, come back
        // first (in sequence order) and end the pass with 100 B not yet reached.
        if (count === 100) offsetMs += 5_000;
      },
    });
    assert.equal(replayed.length, N - 100, `replayed ${replayed.length}`);
    assert.equal(new Set(done).size, N - 100);
    const left = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(left.filter((m) => m.reason === "B").length, 0, "no B left in the dead-letter queue");
    assert.equal(left.filter((m) => m.reason === "A").length, 100, "the other group untouched");
  });

  it("stops when a pass gets nowhere, and says which planned messages are still dead-lettered: partial, run again", async function () {
    const service = createConsoleService({ client: fixture.client, entity: HELD });
    const plan = await service.plan("purge", { all: true });
    assert.deepEqual(plan.messages.map((m) => m.messageId).sort(), ["h-0", "h-1"]);
    assert.equal(plan.capped, false, "two messages: the whole group");
    // Another receiver holds h-1's lock for the whole run: the run cannot reach it.
    const other = fixture.client.createReceiver(HELD, { subQueueType: "deadLetter" });
    try {
      const locked = await other.receiveMessages(2, { maxWaitTimeInMs: 2_000 });
      for (const m of locked) if (m.messageId === "h-0") await other.abandonMessage(m);
      assert.ok(locked.some((m) => m.messageId === "h-1"));
      const job = service.run(plan.token);
      // Every state a poll could see, looked at on each turn of the event loop: the check of what is left (a peek)
      // takes a round trip, and a poll then must not read "done" for a run that turns out partial.
      const seen: string[] = [job.state];
      const deadline = Date.now() + 60_000;
      while (job.state === "running" && Date.now() < deadline) {
        await new Promise((resolve) => setImmediate(resolve));
        if (seen.at(-1) !== job.state) seen.push(job.state);
      }
      assert.deepEqual(seen, ["running", "partial"], `${job.error ?? ""} ${JSON.stringify(job.results)}`);
      assert.deepEqual(
        job.results.map((r) => [r.messageId, r.result, "why" in r ? r.why : undefined]),
        [
          ["h-0", "purged", undefined],
          ["h-1", "not done", "still dead-lettered: run again"],
        ],
      );
    } finally {
      await other.close();
    }
    const left = await peekDeadLetters(fixture.client, HELD);
    assert.deepEqual(
      left.map((m) => m.messageId),
      ["h-1"],
    );
  });
});
