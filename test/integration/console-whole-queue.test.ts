import assert from "node:assert/strict";
import { z } from "zod";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  createConsoleService,
  type AuditEvent,
  type ConsoleService,
  type Job,
} from "../../src/console/service.ts";
import { openArchive, readArchive, restoreArchived } from "../../src/servicebus/dead-letter-archive.ts";
import { peekDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { deadLetterMany } from "../helpers/dead-letters.ts";

const QUEUE = "console-whole";
const A = 5_341;
const B = 5;

async function ended(service: ConsoleService, job: Job): Promise<Job> {
  await waitUntil(() => service.job(job.id)?.state !== "running", `job ${job.id} ended`, 60_000);
  return service.job(job.id)!;
}

// The case: 5,341 dead letters of one reason, then 5 newer of another. The old console peeked the first
// 5,000, showed "5000+" and no group for the newer reason, and could not plan for it.
describe("sbinbox console over the whole dead-letter queue: past the first 5,000, exact actions, two operators", function () {
  this.timeout(180_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { MaxDeliveryCount: 100 } }));
  let dir: string;
  const events: AuditEvent[] = [];
  let service: ConsoleService;

  before(async function () {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-archive-"));
    await deadLetterMany(
      fixture.client,
      QUEUE,
      A,
      () => "A",
      () => "Order",
    );
    await deadLetterMany(
      fixture.client,
      QUEUE,
      B,
      () => "B",
      () => "Credit",
      A,
    );
    service = createConsoleService({
      client: fixture.client,
      entity: QUEUE,
      audit: (e) => events.push(e),
      archive: (who) => openArchive(dir, QUEUE, who),
      setAsideAllowed: true,
      validate: (type, body) => {
        if (type !== "Order") return `no handler for ${type}`;
        const r = z.object({ n: z.number() }).safeParse(body);
        return r.success
          ? undefined
          : `does not match the Order schema: ${r.error.issues[0]!.path.join(".")}`;
      },
    });
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("counts every dead letter per reason and type, exactly, with no cap", async function () {
    const state = await service.state();
    assert.equal(state.deadLettered, A + B);
    assert.deepEqual(state.reasons, [
      { name: "A", count: A },
      { name: "B", count: B },
    ]);
    assert.deepEqual(state.types, [
      { name: "Order", count: A },
      { name: "Credit", count: B },
    ]);
    assert.equal(state.queue.capped, false);
  });

  it("pages and filters by reason, type, MessageId and enqueued time", async function () {
    const b = await service.messages({ reason: "B" }, 0, 50);
    assert.equal(b.total, B);
    assert.deepEqual(
      b.messages.map((m) => m.messageId),
      ["d-5341", "d-5342", "d-5343", "d-5344", "d-5345"],
    );
    assert.equal((await service.messages({ type: "Credit" }, 0, 50)).total, B);
    const deep = await service.messages({}, 5_000, 50);
    assert.equal(deep.total, A + B);
    assert.equal(deep.messages[0]!.messageId, "d-5000", "page 101 is reachable");
    assert.deepEqual(
      (await service.messages({ messageId: "d-4321" }, 0, 50)).messages.map((m) => m.messageId),
      ["d-4321"],
    );
    const later = new Date(Date.now() + 60_000).toISOString();
    assert.equal((await service.messages({ enqueuedFrom: later }, 0, 50)).total, 0);
    assert.equal((await service.messages({ enqueuedTo: later }, 0, 50)).total, A + B);
    await assert.rejects(
      service.messages({ enqueuedFrom: "yesterday" }, 0, 50),
      /enqueuedFrom "yesterday" is not a time/,
    );
  });

  it("replays the newer reason past the first 5,000 with the others set aside (opt-in): the plan names how many, no other message's delivery count rises", async function () {
    const before = new Map((await peekDeadLetters(fixture.client, QUEUE)).map((m) => [m.sequenceNumber, m]));
    const plain = await service.plan("replay", { filter: { reason: "B" } }, "alice");
    assert.equal(plain.setAside, undefined, "not asked for: nothing set aside");
    const plan = await service.plan("replay", { filter: { reason: "B" } }, "alice", { setAside: true });
    assert.equal(plan.count, B);
    assert.equal(
      plan.setAside?.warning,
      `${A} other dead letters will be set aside (deferred) permanently: only sbinbox or a receive by sequence number can reach them`,
    );
    assert.ok(
      events.some((e) => e.event === "plan" && e.setAside === A),
      "the audit's plan line says how many it sets aside",
    );
    const job = await ended(service, service.run(plan.token, "alice"));
    assert.equal(job.state, "done", JSON.stringify(job));
    assert.deepEqual(job.counts, { replayed: B });
    const after = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(after.length, A);
    const raised = after.filter((m) => m.deliveryCount !== before.get(m.sequenceNumber)!.deliveryCount);
    assert.equal(raised.length, 0, `${raised.length} untouched dead letters had their delivery count raised`);
    assert.equal(fixture.broker.counts(QUEUE).active, B, "the copies are in the queue");
  });

  it("acts on a selection across pages exactly, archives a purge first, and restores from the archive", async function () {
    const first = (await service.messages({}, 0, 50)).messages.slice(0, 2);
    const far = (await service.messages({}, 4_000, 50)).messages.slice(0, 1);
    const chosen = [...first, ...far];
    const plan = await service.plan(
      "purge",
      { sequenceNumbers: chosen.map((m) => m.sequenceNumber) },
      "alice",
    );
    assert.equal(plan.count, 3);
    const job = await ended(service, service.run(plan.token, "alice"));
    assert.deepEqual(job.counts, { purged: 3 });
    const left = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(left.length, A - 3);
    for (const m of chosen) assert.ok(!left.some((l) => l.sequenceNumber === m.sequenceNumber), m.messageId);

    const archived = readArchive(job.archive!);
    assert.deepEqual(
      archived.map((r) => [r.messageId, r.operator, r.reason, Buffer.from(r.body, "base64").toString()]),
      chosen.map((m) => [m.messageId, "alice", "A", JSON.stringify({ n: Number(m.messageId.slice(2)) })]),
    );
    const audit = events.filter((e) => "job" in e && e.job === job.id);
    assert.deepEqual(
      audit.map((e) => e.event),
      ["run", "result", "result", "result", "end"],
    );
    assert.ok(events.some((e) => e.event === "plan" && e.operator === "alice" && e.count === 3));
    assert.deepEqual(
      audit
        .filter((e) => e.event === "result")
        .map((e) => [(e as { messageId: string }).messageId, (e as { result: string }).result]),
      chosen.map((m) => [m.messageId, "purged"]),
    );

    const sender = fixture.client.createSender(QUEUE);
    try {
      const copy = await restoreArchived(sender, archived[2]!);
      assert.equal(
        copy,
        (await import("../../src/servicebus/message-id.ts")).restoreMessageId(
          far[0]!.messageId,
          1,
          archived[2]!,
        ),
      );
    } finally {
      await sender.close();
    }
    const receiver = fixture.client.createReceiver(QUEUE, {
      receiveMode: "receiveAndDelete",
      skipParsingBodyAsJson: true,
    });
    try {
      const got = await receiver.receiveMessages(B + 1, { maxWaitTimeInMs: 2_000 });
      const restored = got.find(
        (m) => m.applicationProperties?.["sbinbox-original-key"] === far[0]!.messageId,
      );
      assert.ok(restored, "the restored copy is in the queue, keyed by its original");
      assert.equal(
        Buffer.from(restored.body as Buffer).toString(),
        JSON.stringify({ n: Number(far[0]!.messageId.slice(2)) }),
      );
    } finally {
      await receiver.close();
    }
  });

  it("two operators on one queue: the overlap is reported as held by another operator, nothing is acted on twice", async function () {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let entered = false;
    const slow = createConsoleService({
      client: fixture.client,
      entity: QUEUE,
      archive: (who) => {
        const inner = openArchive(dir, QUEUE, who);
        return {
          path: inner.path,
          async append(m, info) {
            entered = true;
            await gate;
            return inner.append(m, info);
          },
        };
      },
    });
    const targets = (await service.messages({}, 0, 40)).messages.map((m) => m.sequenceNumber);
    const bobPlan = await slow.plan("purge", { sequenceNumbers: targets.slice(0, 20) }, "bob");
    const bob = slow.run(bobPlan.token, "bob");
    await waitUntil(() => entered, "bob's run holds its first messages");
    const alicePlan = await service.plan("purge", { sequenceNumbers: targets }, "alice");
    const alice = await ended(service, service.run(alicePlan.token, "alice"));
    assert.equal(alice.state, "partial");
    assert.deepEqual(alice.counts, { purged: 20, "held by another operator": 20 });
    assert.ok(
      alice.results
        .filter((r) => r.result === "held by another operator")
        .every((r) => targets.slice(0, 20).includes(r.sequenceNumber)),
    );
    release();
    const bobEnded = await ended(slow, bob);
    assert.deepEqual(bobEnded.counts, { purged: 20 });
    assert.equal((await peekDeadLetters(fixture.client, QUEUE)).length, A - 3 - 40);
  });

  it("edit-and-retry: the edited body must be JSON and pass the handler's schema; then it is sent, and the audit keeps both hashes", async function () {
    const [target] = (await service.messages({ reason: "A" }, 0, 1)).messages;
    const seq = target!.sequenceNumber;
    await assert.rejects(service.planEdit(seq, "{not json", "carol"), /not JSON/);
    await assert.rejects(
      service.planEdit(seq, '{"n":"seven"}', "carol"),
      /does not match the Order schema: n/,
    );
    const plan = await service.planEdit(seq, '{"n":7}', "carol");
    assert.equal(plan.action, "edit");
    const job = await ended(service, service.run(plan.token, "carol"));
    assert.deepEqual(job.counts, { replayed: 1 });
    const receiver = fixture.client.createReceiver(QUEUE, {
      receiveMode: "receiveAndDelete",
      skipParsingBodyAsJson: true,
    });
    try {
      const got = await receiver.receiveMessages(50, { maxWaitTimeInMs: 2_000 });
      const copy = got.find((m) => m.applicationProperties?.["sbinbox-original-key"] === target!.messageId);
      assert.equal(Buffer.from(copy!.body as Buffer).toString(), '{"n":7}', "the edited body was sent");
    } finally {
      await receiver.close();
    }
    const planEvent = events.find((e) => e.event === "plan" && e.action === "edit");
    assert.ok(planEvent && planEvent.event === "plan" && planEvent.edit);
    assert.match(planEvent.edit.sha256After, /^[0-9a-f]{64}$/);
    assert.notEqual(planEvent.edit.sha256Before, planEvent.edit.sha256After);
    assert.equal(planEvent.operator, "carol");
    // Removed from the dead-letter queue as a purge removes: archived first, the edited body beside it.
    const result = events.find((e) => e.event === "result" && e.action === "edit");
    assert.ok(result && result.event === "result" && result.archived, JSON.stringify(result));
    assert.equal(result.archived.path, job.archive);
    const line = readArchive(result.archived.path)[result.archived.line - 1]!;
    assert.equal(line.sequenceNumber, seq);
    assert.equal(
      Buffer.from(line.body, "base64").toString(),
      JSON.stringify({ n: Number(target!.messageId.slice(2)) }),
    );
    assert.equal(Buffer.from(line.editedBody!, "base64").toString(), '{"n":7}');
    assert.equal(line.operator, "carol");
  });

  it("masks the fields the handler marks personal, refuses them unmasked without --show-personal, and refuses their edit", async function () {
    const masking = createConsoleService({
      client: fixture.client,
      entity: QUEUE,
      personalFields: (type) => (type === "Order" ? ["n"] : undefined),
      validate: () => undefined,
    });
    const [target] = (await masking.messages({ reason: "A" }, 0, 1)).messages;
    const shown = await masking.body(target!.sequenceNumber);
    assert.deepEqual([JSON.parse(shown!.body!), shown!.masked], [{ n: "[personal]" }, true]);
    await assert.rejects(masking.body(target!.sequenceNumber, true), /--show-personal/);
    await assert.rejects(
      masking.planEdit(target!.sequenceNumber, '{"n":1}', "dave"),
      /needs --show-personal/,
    );
    const open = createConsoleService({
      client: fixture.client,
      entity: QUEUE,
      personalFields: () => ["n"],
      showPersonal: true,
    });
    const unmasked = await open.body(target!.sequenceNumber, true);
    assert.equal(typeof (JSON.parse(unmasked!.body!) as { n: unknown }).n, "number");
  });
});
