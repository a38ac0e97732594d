import assert from "node:assert/strict";
import type { ServiceBusMessage, ServiceBusMessageBatch } from "@azure/service-bus";
import { sendInBatches } from "../../src/servicebus/publisher.ts";

/**
 * A sender whose batches hold `perBatch` messages and whose sends stay pending until the test answers them: the
 * SDK's own batching is exercised by the integration tests; this pins down how many sends are open at once.
 */
function heldSender(perBatch: number) {
  const pending: { ids: string[]; resolve: () => void; reject: (e: Error) => void }[] = [];
  let maxOpen = 0;
  let open = 0;
  const sender = {
    createMessageBatch: () => {
      const ids: string[] = [];
      return Promise.resolve({
        get count() {
          return ids.length;
        },
        tryAddMessage(m: ServiceBusMessage) {
          if (ids.length >= perBatch) return false;
          ids.push(String(m.messageId));
          return true;
        },
        ids,
      } as unknown as ServiceBusMessageBatch);
    },
    sendMessages: (batch: ServiceBusMessageBatch) =>
      new Promise<void>((resolve, reject) => {
        open += 1;
        maxOpen = Math.max(maxOpen, open);
        const done = () => (open -= 1);
        pending.push({
          ids: (batch as unknown as { ids: string[] }).ids,
          resolve: () => (done(), resolve()),
          reject: (e) => (done(), reject(e)),
        });
      }),
  };
  return { sender, pending, maxOpen: () => maxOpen };
}

const messages = (n: number): ServiceBusMessage[] =>
  Array.from({ length: n }, (_, i) => ({ messageId: `m${i}`, body: "" }));

/** Answers the oldest open send each time one is open, until `done` settles. */
async function answerInOrder(
  pending: { resolve: () => void }[],
  done: Promise<unknown>,
  fail?: { at: number; error: Error; reject: (i: number) => void },
) {
  let settled = false;
  void done.then(
    () => (settled = true),
    () => (settled = true),
  );
  let answered = 0;
  while (!settled) {
    await new Promise((r) => setImmediate(r));
    const next = pending.shift();
    if (!next) continue;
    if (fail && answered === fail.at) fail.reject(answered);
    else next.resolve();
    answered += 1;
  }
}

describe("sendInBatches", function () {
  it("with maxInFlight 1, never opens a send before the previous one is answered; batches go in order", async () => {
    const { sender, pending, maxOpen } = heldSender(10);
    const sent: string[][] = [];
    const counts: number[] = [];
    const done = sendInBatches(sender, messages(95), { onSent: (n) => counts.push(n) });
    const order: string[][] = [];
    const original = pending.push.bind(pending);
    pending.push = (...items) => (items.forEach((i) => order.push(i.ids)), original(...items));
    await answerInOrder(pending, done);
    assert.equal(await done, 95);
    assert.equal(maxOpen(), 1);
    assert.deepEqual(counts, [10, 10, 10, 10, 10, 10, 10, 10, 10, 5]);
    sent.push(...order);
    assert.deepEqual(
      sent.flat(),
      messages(95).map((m) => m.messageId),
    );
  });

  it("with maxInFlight 3, keeps at most three open and reports them in order", async () => {
    const { sender, pending, maxOpen } = heldSender(10);
    const counts: number[] = [];
    // Answered only once three are open: shows the third is sent without waiting for the first.
    const done = sendInBatches(sender, messages(100), { maxInFlight: 3, onSent: (n) => counts.push(n) });
    while (pending.length < 3) await new Promise((r) => setImmediate(r));
    assert.equal(pending.length, 3);
    await answerInOrder(pending, done);
    assert.equal(await done, 100);
    assert.equal(maxOpen(), 3);
    assert.equal(counts.length, 10);
  });

  it("a failed send fails the call, after the sends already open were answered; onSent counts only those", async () => {
    const { sender, pending } = heldSender(10);
    let acknowledged = 0;
    const done = sendInBatches(sender, messages(100), { maxInFlight: 2, onSent: (n) => (acknowledged += n) });
    const refused = new Error("refused");
    let rejectNext: ((e: Error) => void) | undefined;
    const failing = {
      at: 3,
      error: refused,
      reject: () => rejectNext?.(refused),
    };
    // The fourth send is refused; everything before it was answered.
    const shift = pending.shift.bind(pending);
    pending.shift = () => {
      const next = shift();
      rejectNext = next?.reject;
      return next;
    };
    await Promise.all([answerInOrder(pending, done, failing), assert.rejects(done, /refused/)]);
    assert.ok(acknowledged >= 30 && acknowledged <= 40, `${acknowledged}`);
  });

  it("an empty source sends nothing", async () => {
    const { sender, pending } = heldSender(10);
    assert.equal(await sendInBatches(sender, []), 0);
    assert.equal(pending.length, 0);
  });
});
