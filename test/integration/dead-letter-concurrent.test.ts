import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import {
  createConsoleService,
  type AuditEvent,
  type ConsoleService,
  type Job,
} from "../../src/console/service.ts";
import { peekDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { deadLetterMany } from "../helpers/dead-letters.ts";

const QUEUE = "dlq-concurrent";
const FAILING = "dlq-failing";
const UNAUDITED = "dlq-unaudited";
const GROUP = 2_500;
/** Four reasons taken in turn: a walk to the group's last message passes 7,500 others it must hold locked. */
const reasonOf = (n: number) => ["Timeout", "Schema", "Other", "Poison"][n % 4]!;

async function ended(service: ConsoleService, job: Job): Promise<Job> {
  await waitUntil(() => service.job(job.id)?.state !== "running", `job ${job.id} ended`, 240_000);
  return service.job(job.id)!;
}

// The defect: each walk held every other dead letter it passed, and one receiver (one AMQP session, whose window
// is the SDK's 2,048 unsettled deliveries) could hold no more, so each walk stopped 2,048 messages in, read an empty
// receive as the end of the queue, and both runs named about half the group "held by another operator" that
// nobody held. Two consoles, each with its own connection, replay the same 2,500 at once by default (lock and
// abandon, nothing deferred).
describe("two consoles replaying one large group at once, by default (lock and abandon)", function () {
  this.timeout(300_000);
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { MaxDeliveryCount: 100 },
      [FAILING]: { MaxDeliveryCount: 100 },
      [UNAUDITED]: { MaxDeliveryCount: 100 },
    }),
  );

  before(async () => {
    await deadLetterMany(fixture.client, QUEUE, 4 * GROUP, reasonOf);
  });

  it("replays each message exactly once between them, the rest named held by another operator or gone, none deferred", async function () {
    const before = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(before.filter((m) => m.reason === "Poison").length, GROUP);
    const second = new ServiceBusClient(fixture.broker.connectionString, {
      retryOptions: { maxRetries: 1, timeoutInMs: 10_000 },
    });
    try {
      const alice = createConsoleService({ client: fixture.client, entity: QUEUE });
      const bob = createConsoleService({ client: second, entity: QUEUE });
      const [alicePlan, bobPlan] = await Promise.all([
        alice.plan("replay", { filter: { reason: "Poison" } }, "alice"),
        bob.plan("replay", { filter: { reason: "Poison" } }, "bob"),
      ]);
      assert.equal(alicePlan.count, GROUP);
      assert.equal(bobPlan.count, GROUP);
      const [a, b] = await Promise.all([
        ended(alice, alice.run(alicePlan.token, "alice")),
        ended(bob, bob.run(bobPlan.token, "bob")),
      ]);
      const replayed = (job: Job) =>
        job.results.filter((r) => r.result === "replayed").map((r) => r.sequenceNumber);
      const both = [...replayed(a), ...replayed(b)];
      assert.equal(both.length, GROUP, `alice ${JSON.stringify(a.counts)}, bob ${JSON.stringify(b.counts)}`);
      assert.equal(new Set(both).size, GROUP, "no message replayed by both");
      for (const job of [a, b]) {
        assert.equal(job.error, undefined);
        // What one did not replay, the other held (or had replayed already: gone), and did replay.
        for (const r of job.results)
          assert.ok(["replayed", "held by another operator", "gone"].includes(r.result), r.result);
        const other = new Set(replayed(job === a ? b : a));
        for (const r of job.results) if (r.result !== "replayed") assert.ok(other.has(r.sequenceNumber));
      }
      const after = await peekDeadLetters(fixture.client, QUEUE);
      assert.equal(after.filter((m) => m.reason === "Poison").length, 0, "the whole group replayed");
      assert.equal(after.length, 3 * GROUP, "every other dead letter still there");
      assert.ok(
        after.every((m) => m.state === "active"),
        "none deferred",
      );
      assert.equal(fixture.broker.counts(QUEUE).active, GROUP, "one copy of each: none sent twice");
    } finally {
      await second.close();
    }
  });

  it("a run whose audit line cannot be written is refused, shown nowhere, and its confirmation still good", async function () {
    await deadLetterMany(fixture.client, UNAUDITED, 3, () => "A");
    let full = true;
    const events: string[] = [];
    const service = createConsoleService({
      client: fixture.client,
      entity: UNAUDITED,
      audit(event) {
        if (event.event === "run" && full) throw new Error("the audit disk is full");
        events.push(event.event);
      },
    });
    const plan = await service.plan("replay", { filter: { reason: "A" } }, "alice");
    assert.throws(() => service.run(plan.token, "alice"), /the audit disk is full/);
    assert.equal(service.running(), undefined, "no run shown as running");
    assert.equal((await peekDeadLetters(fixture.client, UNAUDITED)).length, 3, "nothing replayed");
    full = false;
    const job = await ended(service, service.run(plan.token, "alice"));
    assert.deepEqual(job.counts, { replayed: 3 });
    assert.deepEqual(events, ["plan", "run", "result", "result", "result", "end"]);
  });

  it("an error mid-run: the message in hand failed, the ones never got to are not reached, not held", async function () {
    await deadLetterMany(fixture.client, FAILING, 10, () => "A");
    let appended = 0;
    const audited: AuditEvent[] = [];
    const service = createConsoleService({
      client: fixture.client,
      entity: FAILING,
      audit: (event) => audited.push(event),
      archive: () => ({
        path: "/nowhere/archive.jsonl",
        append() {
          if (++appended === 4) throw new Error("the archive's disk is full");
          return appended;
        },
      }),
    });
    const plan = await service.plan("purge", { filter: { reason: "A" } }, "alice");
    const job = await ended(service, service.run(plan.token, "alice"));
    assert.equal(job.state, "failed");
    assert.equal(job.error, "the archive's disk is full");
    assert.deepEqual(job.counts, { purged: 3, failed: 1, "not reached": 6 });
    // The audit's end event carries the error that ended the run, not only the state.
    const end = audited.at(-1)!;
    assert.equal(end.event, "end");
    assert.deepEqual(
      end.event === "end" ? { state: end.state, error: end.error, counts: end.counts } : undefined,
      { state: "failed", error: "the archive's disk is full", counts: job.counts },
    );
    const failed = job.results.find((r) => r.result === "failed")!;
    assert.equal(failed.messageId, "d-3");
    assert.equal(failed.why, "the archive's disk is full");
    for (const r of job.results.filter((r) => r.result === "not reached"))
      assert.match(r.why!, /ended on an error first \(the archive's disk is full\): still dead-lettered/);
    const left = await peekDeadLetters(fixture.client, FAILING);
    assert.deepEqual(
      left.map((m) => m.messageId),
      Array.from({ length: 7 }, (_, i) => `d-${i + 3}`),
      "the failed one and the ones not reached are still dead-lettered",
    );
  });
});

// The defect: rhea's session buffer frees a slot only once every delivery before it is settled, so a receiver
// stalls 2,048 deliveries after its oldest held one, acted-on ones included. A walk that counted only the held ones
// went on with one receiver until it stalled (1,024 held, 1,024 replayed in a group of every other message), read
// the empty receive as the end of the queue, and named the rest "held by another operator" with nobody else there.
describe("a dense group (every other dead letter), by default", function () {
  this.timeout(300_000);
  const ALONE = "dlq-dense-alone";
  const TWO = "dlq-dense-two";
  const DENSE = 1_500;
  const everyOther = (n: number) => (n % 2 === 0 ? "A" : "B");
  const fixture = useLocalBroker(
    brokerConfig({ [ALONE]: { MaxDeliveryCount: 100 }, [TWO]: { MaxDeliveryCount: 100 } }),
  );
  const replayed = (job: Job) =>
    job.results.filter((r) => r.result === "replayed").map((r) => r.sequenceNumber);

  it("one console alone replays all of it, none named held", async function () {
    await deadLetterMany(fixture.client, ALONE, 2 * DENSE, everyOther);
    const counted = new Map(
      (await peekDeadLetters(fixture.client, ALONE)).map((m) => [m.messageId, m.deliveryCount]),
    );
    const alice = createConsoleService({ client: fixture.client, entity: ALONE });
    const plan = await alice.plan("replay", { filter: { reason: "A" } }, "alice");
    assert.equal(plan.count, DENSE);
    const job = await ended(alice, alice.run(plan.token, "alice"));
    assert.deepEqual(job.counts, { replayed: DENSE });
    const after = await peekDeadLetters(fixture.client, ALONE);
    assert.deepEqual(new Set(after.map((m) => m.reason)), new Set(["B"]));
    assert.equal(after.length, DENSE);
    // One walk passed each B once: a walk that stalled and went round again abandoned the first 1,024 twice.
    const raised = after.filter((m) => m.deliveryCount > counted.get(m.messageId)! + 1);
    assert.equal(raised.length, 0, `${raised.length} passed more than once`);
    assert.equal(fixture.broker.counts(ALONE).active, DENSE);
  });

  it("two consoles at once replay each message exactly once between them", async function () {
    await deadLetterMany(fixture.client, TWO, 2 * DENSE, everyOther);
    const second = new ServiceBusClient(fixture.broker.connectionString, {
      retryOptions: { maxRetries: 1, timeoutInMs: 10_000 },
    });
    try {
      const alice = createConsoleService({ client: fixture.client, entity: TWO });
      const bob = createConsoleService({ client: second, entity: TWO });
      const [alicePlan, bobPlan] = await Promise.all([
        alice.plan("replay", { filter: { reason: "A" } }, "alice"),
        bob.plan("replay", { filter: { reason: "A" } }, "bob"),
      ]);
      const [a, b] = await Promise.all([
        ended(alice, alice.run(alicePlan.token, "alice")),
        ended(bob, bob.run(bobPlan.token, "bob")),
      ]);
      const both = [...replayed(a), ...replayed(b)];
      assert.equal(both.length, DENSE, `alice ${JSON.stringify(a.counts)}, bob ${JSON.stringify(b.counts)}`);
      assert.equal(new Set(both).size, DENSE, "no message replayed by both");
      for (const job of [a, b]) {
        const other = new Set(replayed(job === a ? b : a));
        for (const r of job.results)
          if (r.result !== "replayed") assert.ok(other.has(r.sequenceNumber), r.result);
      }
      assert.equal((await peekDeadLetters(fixture.client, TWO)).length, DENSE, "every B still there");
      assert.equal(fixture.broker.counts(TWO).active, DENSE, "one copy of each");
    } finally {
      await second.close();
    }
  });
});
