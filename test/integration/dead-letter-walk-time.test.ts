import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { actOnDeadLetters } from "../../src/servicebus/dead-letter-act.ts";
import { peekDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { deadLetterMany } from "../helpers/dead-letters.ts";

const QUEUE = "dlq-walk-time";
const COUNT = 1_000;

// A walk holds every message it passes locked; the entity's lock duration (2 s here, 120 s in prod) bounds how long
// it may take. A slow act (20 ms a message, 50 per batch of 100) outlasts it within a few batches. Before, the
// held locks ran out, the messages came round again, the walk took that as the end, and after three rounds the rest
// of the group was "not reached". Now a walk stops half way to its first held lock's expiry, abandons what it holds,
// and walks again while it makes progress.
describe("a walk that would outlast the lock duration", function () {
  this.timeout(120_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { MaxDeliveryCount: 100, LockDuration: "PT2S" } }));

  it("stops before its held locks run out and walks again until the whole group is acted on", async function () {
    await deadLetterMany(fixture.client, QUEUE, COUNT, (n) => (n % 2 === 0 ? "A" : "B"));
    const group = (await peekDeadLetters(fixture.client, QUEUE))
      .filter((m) => m.reason === "A")
      .map((m) => m.sequenceNumber);
    const outcome = await actOnDeadLetters(fixture.client, QUEUE, group, async (receiver, message) => {
      await sleep(20);
      await receiver.completeMessage(message);
    });
    assert.deepEqual(Object.fromEntries(outcome.notActed), {});
    assert.equal(outcome.acted.length, COUNT / 2);
    assert.equal(new Set(outcome.acted).size, COUNT / 2, "each once");
    const left = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(left.length, COUNT / 2);
    assert.ok(left.every((m) => m.reason === "B"));
  });
});
