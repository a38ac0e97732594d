import assert from "node:assert/strict";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readArchive } from "../../src/servicebus/dead-letter-archive.ts";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import { CopyProperty } from "../../src/domain/envelope.ts";
import { DoNotRetryError } from "../../src/domain/errors.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { accountSql } from "../../src/example/index.ts";
import { replayDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { replayMessageId } from "../../src/servicebus/message-id.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { startCli, type CliResult } from "../helpers/cli.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "dlq";

describe("sbinbox dlq: list, replay and purge on the local broker, replays applied once", function () {
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: "PT10M" },
    }),
  );
  let db: Database;
  let broken = true;
  const handler: MessageHandler = {
    kind: "transactional",
    type: "Credit",
    schema: z.object({ amount: z.number() }),
    async handle(body, tx, context) {
      if (broken) throw new DoNotRetryError("the ledger rejects this account (a bug, fixed later)");
      await tx.query(accountSql.insertCredit[tx.dialect], [
        context.messageId,
        "acct",
        (body as { amount: number }).amount,
      ]);
    },
  };
  before(async () => {
    db = await exampleDatabase("dlq_cli");
  });
  after(async () => {
    await db.close();
  });

  const dlq = (...args: string[]): Promise<CliResult> =>
    startCli(["dlq", ...args], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: QUEUE,
    }).done;
  const credits = async (id: string): Promise<number> => {
    const { rows } = await db.sql.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM example_credits WHERE message_id = $1",
      [id],
    );
    return Number(rows[0]?.n ?? 0);
  };
  const body = (amount: number) => Buffer.from(JSON.stringify({ amount }));

  /** Runs a worker until `settled` messages are settled. */
  async function process(settled: number): Promise<ReturnType<typeof startTestWorker>> {
    const worker = startTestWorker({ client: fixture.client, db, queue: QUEUE, handlers: [handler] });
    try {
      await waitUntil(() => worker.stats.settled === settled, `${settled} message(s) settled`, 15_000);
    } finally {
      await worker.stop();
    }
    return worker;
  }

  it("a fixed handler: replay inside the duplicate-detection window is processed once", async function () {
    await sendRawMessages(fixture.client, QUEUE, [{ messageId: "m-fix", subject: "Credit", body: body(11) }]);
    await process(1);
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 1);

    const list = await dlq("list");
    assert.equal(list.code, 0, list.stderr);
    assert.match(
      list.stdout,
      /^m-fix\tm-fix\tNotRetryable\t\S+\t\d+\tafter 1 attempt: permanent DoNotRetryError: the ledger/m,
    );
    assert.ok(!list.stdout.includes('"amount"'), "no body without --bodies");
    const withBodies = await dlq("list", "--bodies", "--json");
    const [row] = withBodies.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(row?.body, '{"amount":11}');

    const dry = await dlq("replay", "--reason", "NotRetryable", "--dry-run");
    assert.match(dry.stdout, /dry run: would replay 1 message/);
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 1, "a dry run changes nothing");

    broken = false;
    const replay = await dlq("replay", "--reason", "NotRetryable");
    assert.equal(replay.code, 0, replay.stderr);
    assert.match(replay.stdout, new RegExp(`replayed m-fix as ${replayMessageId("m-fix", 1)}`));
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0, "removed only after its copy was sent");
    const worker = await process(1);
    assert.equal(worker.stats.committed, 1);
    assert.equal(await credits("m-fix"), 1);
  });

  it("a message whose effect had in fact committed comes back as duplicate: no second effect", async function () {
    broken = false;
    await sendRawMessages(fixture.client, QUEUE, [{ messageId: "m-done", subject: "Credit", body: body(2) }]);
    await process(1);
    assert.equal(await credits("m-done"), 1);
    // A copy of it dead-lettered anyway (its complete was lost and its redeliveries ran out, say).
    await sendRawMessages(fixture.client, QUEUE, [
      {
        messageId: "m-done-retry-copy",
        subject: "Credit",
        body: body(2),
        applicationProperties: { [CopyProperty.originalKey]: "m-done", [CopyProperty.attempt]: 3 },
      },
    ]);
    await deadLetterNext("lost its lock");
    const replay = await dlq("replay", "--id", "m-done-retry-copy");
    assert.equal(replay.code, 0, replay.stderr);
    assert.match(replay.stdout, new RegExp(`as ${replayMessageId("m-done", 1)}`), "keyed by the original");
    const worker = await process(1);
    assert.equal(worker.stats.duplicate, 1);
    assert.equal(await credits("m-done"), 1);
  });

  it("replayed twice (two dead-lettered copies, and a copy dead-lettered again): one effect", async function () {
    broken = false;
    const copy = (messageId: string, replay?: number) => ({
      messageId,
      subject: "Credit",
      body: body(5),
      applicationProperties: {
        [CopyProperty.originalKey]: "m-twice",
        ...(replay ? { [CopyProperty.replay]: replay } : {}),
      },
    });
    await sendRawMessages(fixture.client, QUEUE, [copy("m-twice-a")]);
    await deadLetterNext("first");
    await sendRawMessages(fixture.client, QUEUE, [copy("m-twice-b")]);
    await deadLetterNext("second");
    // A copy from an earlier replay, dead-lettered again.
    await sendRawMessages(fixture.client, QUEUE, [copy("m-twice-c", 1)]);
    await deadLetterNext("third");
    const replay = await dlq("replay", "--all");
    assert.equal(replay.code, 0, replay.stderr);
    assert.match(replay.stdout, /replayed 3 message/);
    assert.match(replay.stdout, new RegExp(`m-twice-a as ${replayMessageId("m-twice", 1)}`));
    assert.match(replay.stdout, new RegExp(`m-twice-b as ${replayMessageId("m-twice", 1)}`));
    assert.match(replay.stdout, new RegExp(`m-twice-c as ${replayMessageId("m-twice", 2)}`));
    // a and b derive the same MessageId: the broker drops the second; c's replay passes under a new id.
    assert.equal(fixture.broker.counts(QUEUE).active, 2);
    const worker = await process(2);
    assert.equal(worker.stats.committed, 1);
    assert.equal(worker.stats.duplicate, 1);
    assert.equal(await credits("m-twice"), 1);
  });

  it("a replay that dies between sending the copy and completing the original: a re-run sends nothing new", async function () {
    broken = false;
    await sendRawMessages(fixture.client, QUEUE, [
      { messageId: "m-crash", subject: "Credit", body: body(9) },
    ]);
    await deadLetterNext("crashy");
    const before = fixture.broker.counts(QUEUE);
    await assert.rejects(
      replayDeadLetters(fixture.client, QUEUE, (m) => m.messageId === "m-crash", {
        beforeComplete: () => {
          throw new Error("the operator's laptop went to sleep");
        },
      }),
      /went to sleep/,
    );
    const mid = fixture.broker.counts(QUEUE);
    assert.equal(mid.active - before.active, 1, "the copy was sent");
    assert.equal(mid.deadLettered, before.deadLettered, "the original is still dead-lettered");
    const rerun = await dlq("replay", "--id", "m-crash");
    assert.equal(rerun.code, 0, rerun.stderr);
    const after = fixture.broker.counts(QUEUE);
    assert.equal(
      after.duplicatesDropped - mid.duplicatesDropped,
      1,
      "the re-run's copy has the same MessageId",
    );
    assert.equal(after.active, mid.active);
    assert.equal(after.deadLettered, before.deadLettered - 1);
    const worker = await process(1);
    assert.equal(worker.stats.committed, 1);
    assert.equal(await credits("m-crash"), 1);
  });

  it("purge asks for --yes off a terminal, selects by reason and age, and refuses bad input", async function () {
    await sendRawMessages(fixture.client, QUEUE, [{ messageId: "m-junk", subject: "Credit", body: body(1) }]);
    await deadLetterNext("Junk");
    const refused = await dlq("purge", "--reason", "Junk");
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /confirm on a terminal or pass --yes/);
    const none = await dlq("purge", "--older-than", "1d", "--yes");
    assert.match(none.stdout, /nothing to purge/);
    const bad = await dlq("purge", "--older-than", "7 days");
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--older-than "7 days" must be a number and a unit/);
    const noSelection = await dlq("replay");
    assert.match(noSelection.stderr, /say what to replay/);
    const dir = await mkdtemp(join(tmpdir(), "sbinbox-archive-"));
    try {
      const purge = await dlq("purge", "--reason", "Junk", "--yes", "--archive-dir", dir);
      assert.equal(purge.code, 0, purge.stderr);
      assert.match(purge.stdout, /purged 1 message/);
      assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
      const [file] = await readdir(dir);
      const archived = readArchive(join(dir, file!));
      assert.deepEqual(
        archived.map((r) => [r.messageId, r.reason, Buffer.from(r.body, "base64").toString()]),
        [["m-junk", "Junk", JSON.stringify({ amount: 1 })]],
      );
      // An archive of another entity is refused, nothing sent, unless --to says where.
      const foreign = join(dir, "foreign.jsonl");
      await writeFile(foreign, JSON.stringify({ ...archived[0], entity: "orders-eu" }) + "\n", {
        mode: 0o600,
      });
      const refused = await dlq("restore", "--archive", foreign);
      assert.equal(refused.code, 2);
      assert.match(
        refused.stderr,
        /holds messages purged from orders-eu, not dlq \(SBINBOX_QUEUE\): nothing restored; pass --to dlq/,
      );
      assert.equal(fixture.broker.counts(QUEUE).active, 0, "nothing sent");
      // Restored, the purged message is applied once, as a replay would have been.
      const restored = await dlq("restore", "--archive", join(dir, file!), "--id", "m-junk");
      assert.equal(restored.code, 0, restored.stderr);
      assert.match(restored.stdout, /restored m-junk as \S+/);
      await process(1);
      assert.equal(await credits("m-junk"), 1);
      assert.equal((await dlq("restore", "--archive", join(dir, file!), "--id", "other")).code, 1);
      const told = await dlq("restore", "--archive", foreign, "--to", QUEUE);
      assert.equal(told.code, 0, told.stderr);
      assert.match(told.stdout, /restored 1 message\(s\) to dlq/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("finds a message dead-lettered from a scheduled retry copy by its original MessageId, and lists that key", async function () {
    let down = true;
    const ledger: MessageHandler = {
      kind: "transactional",
      type: "Credit",
      schema: z.object({ amount: z.number() }),
      async handle(body, tx, context) {
        if (down) throw new Error("503 from the ledger");
        await tx.query(accountSql.insertCredit[tx.dialect], [
          context.messageId,
          "acct",
          (body as { amount: number }).amount,
        ]);
      },
    };
    await sendRawMessages(fixture.client, QUEUE, [
      { messageId: "orig-42", subject: "Credit", body: body(4) },
    ]);
    // One retry in place, then a scheduled copy (its own MessageId) that is dead-lettered as RetriesExhausted.
    const failing = startTestWorker({
      client: fixture.client,
      db,
      queue: QUEUE,
      handlers: [ledger],
      retryPolicy: {
        ...defaultRetryPolicy,
        jitter: 0,
        transientDelaysMs: [100, 300],
        maxInProcessWaitMs: 150,
      },
    });
    try {
      await waitUntil(() => failing.stats.retriesExhausted === 1, "the copy is dead-lettered", 15_000);
    } finally {
      await failing.stop();
    }
    const list = await dlq("list");
    assert.equal(list.code, 0, list.stderr);
    assert.match(
      list.stdout,
      /^(?!orig-42\t)\S+\torig-42\tRetriesExhausted\t/m,
      "the copy's own id, then the inbox key",
    );

    down = false;
    const replay = await dlq("replay", "--id", "orig-42");
    assert.equal(replay.code, 0, replay.stderr);
    assert.match(replay.stdout, /replayed 1 message/);
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    const worker = startTestWorker({ client: fixture.client, db, queue: QUEUE, handlers: [ledger] });
    try {
      await waitUntil(() => worker.stats.committed === 1, "the replay is applied", 15_000);
    } finally {
      await worker.stop();
    }
    assert.equal(await credits("orig-42"), 1);
  });

  it("a replayed copy carries no claim id: it claims afresh instead of re-entering a claim someone may hold", async function () {
    await sendRawMessages(fixture.client, QUEUE, [
      {
        messageId: "m-claimed-copy",
        subject: "Credit",
        body: body(1),
        applicationProperties: { [CopyProperty.originalKey]: "m-claimed", [CopyProperty.claimId]: "12345" },
      },
    ]);
    await deadLetterNext("RetriesExhausted");
    const replay = await dlq("replay", "--id", "m-claimed");
    assert.equal(replay.code, 0, replay.stderr);
    const receiver = fixture.client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
    try {
      const [copy] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
      assert.equal(copy?.messageId, replayMessageId("m-claimed", 1));
      assert.equal(copy?.applicationProperties?.[CopyProperty.originalKey], "m-claimed");
      assert.equal(copy?.applicationProperties?.[CopyProperty.claimId], undefined);
    } finally {
      await receiver.close();
    }
  });

  async function deadLetterNext(reason: string): Promise<void> {
    const receiver = fixture.client.createReceiver(QUEUE);
    try {
      const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
      assert.ok(message, "a message to dead-letter");
      await receiver.deadLetterMessage(message, {
        deadLetterReason: reason,
        deadLetterErrorDescription: "test",
      });
    } finally {
      await receiver.close();
    }
  }
});
