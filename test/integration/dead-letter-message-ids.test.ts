import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import { createConsoleService, type ConsoleService, type Job } from "../../src/console/service.ts";
import { openArchive, readArchive, restoreArchived } from "../../src/servicebus/dead-letter-archive.ts";
import { peekDeadLetters, replayDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { editMessageId, replayMessageId, restoreMessageId } from "../../src/servicebus/message-id.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { deadLetterMany } from "../helpers/dead-letters.ts";

const QUEUE = "dlq-ids";

async function ended(service: ConsoleService, job: Job): Promise<Job> {
  await waitUntil(() => service.job(job.id)?.state !== "running", `job ${job.id} ended`, 30_000);
  return service.job(job.id)!;
}

// A replay, an edit and a restore of one dead letter each send a copy; with duplicate detection on (as on the
// worker's queue in Azure), a copy whose MessageId an earlier action sent within the window is dropped. Each action
// has an id of its own, and a resend of the same action (a lock lost after the send) keeps it.
describe("MessageIds of replay, edit-and-retry and restore: distinct per action, the same for a resend", function () {
  this.timeout(60_000);
  let offsetMs = 0;
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT30S", MaxDeliveryCount: 100, RequiresDuplicateDetection: true },
    }),
    { now: () => Date.now() + offsetMs },
  );
  let dir: string;
  let service: ConsoleService;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-archive-"));
    await deadLetterMany(fixture.client, QUEUE, 3, () => "A");
    service = createConsoleService({
      client: fixture.client,
      entity: QUEUE,
      archive: (who) => openArchive(dir, QUEUE, who),
      validate: () => undefined,
    });
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Takes what the queue holds (receive-and-delete). */
  async function take(): Promise<ServiceBusReceivedMessage[]> {
    const receiver = fixture.client.createReceiver(QUEUE, {
      receiveMode: "receiveAndDelete",
      skipParsingBodyAsJson: true,
    });
    try {
      return await receiver.receiveMessages(20, { maxWaitTimeInMs: 1_000 });
    } finally {
      await receiver.close();
    }
  }

  const seqOf = async (messageId: string) =>
    (await peekDeadLetters(fixture.client, QUEUE)).find((m) => m.messageId === messageId)!.sequenceNumber;

  it("an edit after a replay of the same dead letter (its copy sent, the original not completed) is delivered", async function () {
    const seq = await seqOf("d-0");
    await assert.rejects(
      replayDeadLetters(fixture.client, QUEUE, [seq], {
        beforeComplete: () => {
          throw new Error("the console died between the send and the completion");
        },
      }),
      /the console died/,
    );
    const plan = await service.planEdit(seq, '{"n":70}', "carol");
    const job = await ended(service, service.run(plan.token, "carol"));
    assert.deepEqual(job.counts, { replayed: 1 });
    const got = await take();
    assert.deepEqual(
      got.map((m) => [m.messageId, Buffer.from(m.body as Buffer).toString()]).sort(),
      [
        [replayMessageId("d-0", 1), '{"n":0}'],
        [editMessageId("d-0", 1, sha256('{"n":70}')), '{"n":70}'],
      ].sort(),
      "the replay's copy and the edit's: the edit not dropped as a duplicate",
    );
  });

  it("an edit sent again after its lock was lost is not doubled", async function () {
    const seq = await seqOf("d-1");
    let sends = 0;
    const r = await replayDeadLetters(fixture.client, QUEUE, [seq], {
      bodyOf: () => Buffer.from('{"n":11}'),
      beforeComplete: () => {
        // The first time, the broker's clock passes the lock: the completion is refused, the next round resends.
        if (++sends === 1) offsetMs += 31_000;
      },
    });
    assert.equal(sends, 2, "sent twice: once, then again after the lock was lost");
    assert.equal(r.replayed.length, 1);
    const got = await take();
    assert.deepEqual(
      got.map((m) => m.messageId),
      [editMessageId("d-1", 1, sha256('{"n":11}'))],
      "one copy: the resend dropped by duplicate detection",
    );
    assert.equal(
      (await peekDeadLetters(fixture.client, QUEUE)).filter((m) => m.messageId === "d-1").length,
      0,
    );
  });

  it("a restore after an edit of the same message is delivered; the same record restored again is not doubled", async function () {
    const seq = await seqOf("d-2");
    const plan = await service.planEdit(seq, '{"n":22}', "carol");
    const job = await ended(service, service.run(plan.token, "carol"));
    const record = readArchive(job.archive!).find((r) => r.messageId === "d-2")!;
    const sender = fixture.client.createSender(QUEUE);
    try {
      const first = await restoreArchived(sender, record);
      const again = await restoreArchived(sender, record);
      assert.equal(first, again, "a resend of the same restore has the same id");
      assert.equal(first, restoreMessageId("d-2", 1, record));
    } finally {
      await sender.close();
    }
    const got = await take();
    assert.deepEqual(
      got.map((m) => Buffer.from(m.body as Buffer).toString()).sort(),
      ['{"n":22}', '{"n":2}'].sort(),
      "the edit's copy and the restored original, once each",
    );
    for (const m of got) assert.equal(m.applicationProperties?.["sbinbox-original-key"], "d-2");
  });
});

function sha256(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}
