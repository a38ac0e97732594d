import assert from "node:assert/strict";
import Long from "long";
import { peekDeadLetters, purgeDeadLetters, replayDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";

const QUEUE = "dlq-act";
const DEFAULT = "dlq-act-default";

/** Sends `count` messages m-<n> and dead-letters them, each with reason `reasonOf(n)`. */
async function deadLetter(
  fixture: ReturnType<typeof useLocalBroker>,
  queue: string,
  count: number,
  reasonOf: (n: number) => string,
): Promise<void> {
  await sendRawMessages(
    fixture.client,
    queue,
    Array.from({ length: count }, (_, n) => ({ messageId: `m-${n}`, subject: "X", body: Buffer.from("{}") })),
  );
  const receiver = fixture.client.createReceiver(queue);
  try {
    for (let moved = 0; moved < count;) {
      for (const m of await receiver.receiveMessages(100, { maxWaitTimeInMs: 2_000 })) {
        await receiver.deadLetterMessage(m, {
          deadLetterReason: reasonOf(Number(String(m.messageId).slice(2))),
          deadLetterErrorDescription: "x",
        });
        moved += 1;
      }
    }
  } finally {
    await receiver.close();
  }
}

// Through the real SDK to the local broker, which receives by sequence number only deferred messages, as Service
// Bus does: what a run does to the messages it was not asked to touch is read back by peeking.
describe("dead-letter actions act on exactly the selected messages", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(
    brokerConfig({ [QUEUE]: { MaxDeliveryCount: 100 }, [DEFAULT]: { MaxDeliveryCount: 100 } }),
  );

  before(async () => {
    // 40 of reason A first, then 10 of B: B is reached only past every A.
    await deadLetter(fixture, QUEUE, 50, (n) => (n < 40 ? "A" : "B"));
  });

  it("by default abandons the others it passes: none deferred, a plain receive of the dead-letter queue still gets every one", async function () {
    const queue = DEFAULT;
    await deadLetter(fixture, queue, 12, (n) => (n < 10 ? "A" : "B"));
    const before = await peekDeadLetters(fixture.client, queue);
    const bs = before.filter((m) => m.reason === "B").map((m) => m.sequenceNumber);
    const r = await purgeDeadLetters(fixture.client, queue, bs);
    assert.equal(r.purged.length, 2);
    assert.equal(r.notActed.size, 0);
    const after = await peekDeadLetters(fixture.client, queue);
    assert.equal(after.length, 10);
    assert.ok(
      after.every((m) => m.state === "active"),
      `none deferred: ${after.filter((m) => m.state !== "active").length} are`,
    );
    const plain = fixture.client.createReceiver(queue, {
      subQueueType: "deadLetter",
      receiveMode: "receiveAndDelete",
    });
    try {
      const got: string[] = [];
      for (let i = 0; i < 5 && got.length < 10; i++)
        for (const m of await plain.receiveMessages(10, { maxWaitTimeInMs: 1_000 }))
          got.push(String(m.messageId));
      assert.deepEqual(
        got.sort(),
        before
          .filter((m) => m.reason === "A")
          .map((m) => m.messageId)
          .sort(),
      );
    } finally {
      await plain.close();
    }
  });

  it("with setAside purges the newer reason without raising the delivery count of any other message, three times over", async function () {
    const before = await peekDeadLetters(fixture.client, QUEUE);
    const countsOf = (list: typeof before) =>
      new Map(list.filter((m) => m.reason === "A").map((m) => [m.messageId, m.deliveryCount]));
    const bs = before.filter((m) => m.reason === "B").map((m) => m.sequenceNumber);
    const first = await purgeDeadLetters(fixture.client, QUEUE, bs.slice(0, 4), { setAside: true });
    assert.equal(first.purged.length, 4);
    assert.equal(first.notActed.size, 0);
    for (const part of [bs.slice(4, 7), bs.slice(7)]) {
      const r = await purgeDeadLetters(fixture.client, QUEUE, part, { setAside: true });
      assert.equal(r.purged.length, part.length);
    }
    const after = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(after.length, 40, "only the 10 of B gone");
    assert.deepEqual(countsOf(after), countsOf(before), "no A's delivery count changed");
    assert.ok(
      after.every((m) => m.state === "deferred"),
      "the A met on the way were set aside (deferred), so a later action reaches them by number",
    );
  });

  it("replays deferred dead letters by sequence number, the others untouched", async function () {
    const before = await peekDeadLetters(fixture.client, QUEUE);
    const chosen = [before[3]!, before[17]!, before[30]!];
    const { replayed, notActed } = await replayDeadLetters(
      fixture.client,
      QUEUE,
      chosen.map((m) => m.sequenceNumber),
    );
    assert.deepEqual(
      replayed.map((r) => r.messageId),
      chosen.map((m) => m.messageId),
    );
    assert.equal(notActed.size, 0);
    const after = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(after.length, 37);
    for (const m of after) {
      const was = before.find((b) => b.sequenceNumber === m.sequenceNumber)!;
      assert.equal(m.deliveryCount, was.deliveryCount, m.messageId);
    }
  });

  it("says which selected messages another operator holds and which are gone, and acts on the rest", async function () {
    const list = await peekDeadLetters(fixture.client, QUEUE);
    const [held, free] = [list[0]!, list[1]!];
    const other = fixture.client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
    try {
      const [locked] = await other.receiveDeferredMessages(Long.fromString(held.sequenceNumber));
      assert.equal(locked?.messageId, held.messageId);
      const gone = "999999";
      const r = await purgeDeadLetters(fixture.client, QUEUE, [
        held.sequenceNumber,
        free.sequenceNumber,
        gone,
      ]);
      assert.deepEqual(r.purged, [free.messageId]);
      assert.deepEqual(
        [...r.notActed].sort(),
        [
          [gone, "gone"],
          [held.sequenceNumber, "held by another operator"],
        ].sort(),
      );
      await other.deferMessage(locked);
    } finally {
      await other.close();
    }
    assert.ok((await peekDeadLetters(fixture.client, QUEUE)).some((m) => m.messageId === held.messageId));
  });

  it("stops when asked: the message in hand is finished, the rest are reported as not reached", async function () {
    const list = await peekDeadLetters(fixture.client, QUEUE);
    const stop = new AbortController();
    const r = await purgeDeadLetters(
      fixture.client,
      QUEUE,
      list.slice(0, 10).map((m) => m.sequenceNumber),
      { signal: stop.signal, onProgress: (done) => done === 3 && stop.abort() },
    );
    assert.equal(r.purged.length, 3);
    assert.equal(r.stopped.length, 7);
    assert.equal(r.notActed.size, 0);
    assert.equal((await peekDeadLetters(fixture.client, QUEUE)).length, list.length - 3);
  });

  describe("on a session-enabled queue", function () {
    const SESSIONS = "dlq-act-sessions";
    const sessions = useLocalBroker(
      brokerConfig({ [SESSIONS]: { RequiresSession: true, MaxDeliveryCount: 100 } }),
    );

    before(async function () {
      const sender = sessions.client.createSender(SESSIONS);
      try {
        await sender.sendMessages(
          Array.from({ length: 6 }, (_, n) => ({
            messageId: `s-${n}`,
            sessionId: `acct-${n % 2}`,
            body: "{}",
          })),
        );
      } finally {
        await sender.close();
      }
      for (const id of ["acct-0", "acct-1"]) {
        const receiver = await sessions.client.acceptSession(SESSIONS, id);
        try {
          for (const m of await receiver.receiveMessages(10, { maxWaitTimeInMs: 1_000 }))
            await receiver.deadLetterMessage(m, { deadLetterReason: "X", deadLetterErrorDescription: "x" });
        } finally {
          await receiver.close();
        }
      }
    });

    it("never defers a dead letter with a session id (a deferred one may not be receivable there): acts on it as it comes up", async function () {
      const before = await peekDeadLetters(sessions.client, SESSIONS);
      assert.equal(before.length, 6);
      const last = before[before.length - 1]!;
      const r = await purgeDeadLetters(sessions.client, SESSIONS, [last.sequenceNumber]);
      assert.deepEqual(r.purged, [last.messageId]);
      const after = await peekDeadLetters(sessions.client, SESSIONS);
      assert.equal(after.length, 5);
      assert.ok(
        after.every((m) => m.state === "active"),
        "none deferred",
      );
    });
  });
});
