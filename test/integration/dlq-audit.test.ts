import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { peekDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { runCli, startCli } from "../helpers/cli.ts";
import { deadLetterMany } from "../helpers/dead-letters.ts";

const QUEUE = "dlq-audit";

interface Line {
  component: string;
  event: string;
  operator: string;
  action: string;
  job?: string;
  messages?: { sequenceNumber: string; messageId: string }[];
  sequenceNumber?: string;
  messageId?: string;
  result?: string;
  copyMessageId?: string;
  counts?: Record<string, number>;
  state?: string;
  error?: string;
  osUser?: string;
}

// `sbinbox dlq` records what it does as the console does: each plan, run, per-message result and end a JSON log
// line on stderr, and with --audit-file a fsync'ed line in a file the operator keeps, naming who acted.
describe("sbinbox dlq: a durable, per-operator audit of replay, purge and restore", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { MaxDeliveryCount: 100 } }));
  let dir: string;
  const dlq = (...args: string[]) =>
    runCli(["dlq", ...args], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: QUEUE,
    });
  const lines = async (path: string) =>
    (await readFile(path, "utf8"))
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => JSON.parse(l) as Line);

  async function takeActive(): Promise<void> {
    const receiver = fixture.client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
    try {
      while ((await receiver.receiveMessages(100, { maxWaitTimeInMs: 500 })).length > 0);
    } finally {
      await receiver.close();
    }
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-audit-"));
    await deadLetterMany(fixture.client, QUEUE, 6, (n) => (n < 3 ? "A" : "B"));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("purge, replay and restore each leave plan, run, a result per message and end, by the operator named", async function () {
    const file = join(dir, "audit.jsonl");
    const archiveDir = join(dir, "archive");
    const before = await peekDeadLetters(fixture.client, QUEUE);
    const purge = await dlq(
      "purge",
      "--reason",
      "A",
      "--yes",
      "--operator",
      "bob",
      "--audit-file",
      file,
      "--archive-dir",
      archiveDir,
    );
    assert.equal(purge.code, 0, purge.stderr);
    const replay = await dlq("replay", "--reason", "B", "--operator", "carol", "--audit-file", file);
    assert.equal(replay.code, 0, replay.stderr);
    const [archive] = await readdir(archiveDir);
    const restore = await dlq(
      "restore",
      "--archive",
      join(archiveDir, archive!),
      "--id",
      "d-1",
      "--audit-file",
      file,
      "--operator",
      "dave",
    );
    assert.equal(restore.code, 0, restore.stderr);

    assert.equal((await stat(file)).mode & 0o777, 0o600, "the audit file is the operator's alone");
    const all = await lines(file);
    assert.deepEqual(
      all.map((l) => [l.operator, l.action, l.event]),
      [
        ["bob", "purge", "plan"],
        ["bob", "purge", "run"],
        ["bob", "purge", "result"],
        ["bob", "purge", "result"],
        ["bob", "purge", "result"],
        ["bob", "purge", "end"],
        ["carol", "replay", "plan"],
        ["carol", "replay", "run"],
        ["carol", "replay", "result"],
        ["carol", "replay", "result"],
        ["carol", "replay", "result"],
        ["carol", "replay", "end"],
        ["dave", "restore", "plan"],
        ["dave", "restore", "run"],
        ["dave", "restore", "result"],
        ["dave", "restore", "end"],
      ],
    );
    assert.ok(all.every((l) => l.component === "dlq" && typeof (l as { time?: string }).time === "string"));
    const seqOf = new Map(before.map((m) => [m.messageId, m.sequenceNumber]));
    assert.deepEqual(
      all[0]!.messages,
      ["d-0", "d-1", "d-2"].map((id) => ({ sequenceNumber: seqOf.get(id), messageId: id, reason: "A" })),
    );
    const purged = all.filter((l) => l.action === "purge" && l.event === "result");
    assert.deepEqual(
      purged.map((l) => [l.messageId, l.sequenceNumber, l.result]),
      ["d-0", "d-1", "d-2"].map((id) => [id, seqOf.get(id), "purged"]),
    );
    assert.ok(
      purged.every((l) => l.job === all[1]!.job),
      "one job id across the run's lines",
    );
    const replayed = all.filter((l) => l.action === "replay" && l.event === "result");
    for (const l of replayed)
      assert.match(replay.stdout, new RegExp(`replayed ${l.messageId} as ${l.copyMessageId}`));
    assert.deepEqual(all[11]!.counts, { replayed: 3 });
    assert.equal(all[11]!.state, "done");
    assert.equal(all[14]!.result, "restored");
    assert.match(restore.stdout, new RegExp(`restored d-1 as ${all[14]!.copyMessageId}`));
    // The same records are JSON log lines on stderr.
    const logged = purge.stderr
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { msg: string; audit: Line });
    assert.deepEqual(
      logged.map((l) => l.msg),
      ["dlq.plan", "dlq.run", "dlq.result", "dlq.result", "dlq.result", "dlq.end"],
    );
    assert.ok(logged.every((l) => l.audit.operator === "bob"));
    // --operator is what the caller says; the OS user running the command is recorded beside it.
    const me = userInfo().username;
    assert.ok(all.every((l) => l.osUser === me) && logged.every((l) => l.audit.osUser === me));
  });

  it("refuses an audit file others may read or write; after a torn last line the next line starts on its own", async function () {
    const open = join(dir, "open.jsonl");
    await writeFile(open, "");
    await chmod(open, 0o666);
    const refused = await dlq("replay", "--reason", "nothing", "--audit-file", open);
    assert.equal(refused.code, 2);
    assert.match(
      refused.stderr,
      /the audit file .*open\.jsonl is mode 666: others may read or write it; chmod 600/,
    );
    assert.equal(await readFile(open, "utf8"), "", "nothing written to it");

    const torn = join(dir, "torn.jsonl");
    await writeFile(torn, '{"event":"plan","cut off', { mode: 0o600 });
    await deadLetterMany(
      fixture.client,
      QUEUE,
      2,
      () => "Torn",
      () => "X",
      9_000,
    );
    const purged = await dlq("purge", "--reason", "Torn", "--yes", "--audit-file", torn);
    assert.equal(purged.code, 0, purged.stderr);
    const text = await readFile(torn, "utf8");
    const [cut, ...whole] = text.split("\n").filter((l) => l !== "");
    assert.equal(cut, '{"event":"plan","cut off');
    assert.ok(whole.length > 0, text);
    for (const line of whole) assert.equal((JSON.parse(line) as Line).action, "purge");
  });

  it("refuses to act when the audit file cannot be opened, and a bad --operator: nothing touched", async function () {
    const left = (await peekDeadLetters(fixture.client, QUEUE)).length;
    const noFile = await dlq("purge", "--all", "--yes", "--audit-file", join(dir, "missing", "audit.jsonl"));
    assert.equal(noFile.code, 2);
    assert.match(noFile.stderr, /cannot open the audit file .*missing\/audit\.jsonl/);
    const blank = await dlq("purge", "--all", "--yes", "--operator", " ");
    assert.equal(blank.code, 2);
    assert.match(blank.stderr, /--operator " " must be a name/);
    assert.equal((await peekDeadLetters(fixture.client, QUEUE)).length, left, "nothing purged");
  });

  it("an archive disk that is full fails the purge: the end is audited as failed with the error, nothing deleted", async function () {
    await deadLetterMany(
      fixture.client,
      QUEUE,
      3,
      () => "Full",
      () => "X",
      12_000,
    );
    // The day's archive file is /dev/full, so its write fails with ENOSPC, as on a full disk (today's and
    // tomorrow's name, in case the run crosses midnight UTC).
    const archiveDir = join(dir, "archive-full");
    await mkdir(archiveDir, { mode: 0o700 });
    for (const day of [0, 1]) {
      const date = new Date(Date.now() + day * 86_400_000).toISOString().slice(0, 10);
      await symlink("/dev/full", join(archiveDir, `${QUEUE}-${date}.jsonl`));
    }
    const before = (await peekDeadLetters(fixture.client, QUEUE)).filter((m) => m.reason === "Full");
    assert.equal(before.length, 3);
    const file = join(dir, "full.jsonl");
    const purge = await dlq(
      "purge",
      "--reason",
      "Full",
      "--yes",
      "--audit-file",
      file,
      "--archive-dir",
      archiveDir,
    );
    assert.equal(purge.code, 1, purge.stderr);
    assert.match(purge.stderr, /purge failed: ENOSPC: no space left on device/);
    const all = await lines(file);
    assert.deepEqual(
      all.map((l) => [l.event, l.result]),
      [
        ["plan", undefined],
        ["run", undefined],
        ["result", "failed"],
        ["result", "not reached"],
        ["result", "not reached"],
        ["end", undefined],
      ],
    );
    const end = all.at(-1)!;
    assert.equal(end.state, "failed");
    assert.match(end.error ?? "", /^ENOSPC: no space left on device/);
    assert.deepEqual(end.counts, { failed: 1, "not reached": 2 });

    // The same end event is the JSON log line on stderr.
    const logged = purge.stderr
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { msg: string; audit: Line });
    const loggedEnd = logged.find((l) => l.msg === "dlq.end")!;
    assert.equal(loggedEnd.audit.state, "failed");
    assert.equal(loggedEnd.audit.error, end.error);
    const after = (await peekDeadLetters(fixture.client, QUEUE)).filter((m) => m.reason === "Full");
    assert.deepEqual(
      after.map((m) => m.messageId),
      before.map((m) => m.messageId),
      "all still dead-lettered: none deleted without its archive record",
    );
  });

  it("SIGTERM mid-purge: the message in hand is finished, the rest not reached, the end audited as stopped", async function () {
    const many = 400;
    // The copies the earlier test replayed and restored are in the queue: taken first, so only these 400 are Many.
    await takeActive();
    await deadLetterMany(
      fixture.client,
      QUEUE,
      many,
      () => "Many",
      () => "X",
      1_000,
    );
    const file = join(dir, "stopped.jsonl");
    const before = fixture.broker.counts(QUEUE).deadLettered;
    const cli = startCli(
      [
        "dlq",
        "purge",
        "--reason",
        "Many",
        "--yes",
        "--audit-file",
        file,
        "--archive-dir",
        join(dir, "archive"),
      ],
      { SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString, SBINBOX_QUEUE: QUEUE },
    );
    await waitUntil(
      () => fixture.broker.counts(QUEUE).deadLettered < before - 20,
      "the purge under way",
      30_000,
    );
    cli.child.kill("SIGTERM");
    const result = await cli.done;
    assert.equal(result.code, 1, result.stderr);
    assert.match(result.stderr, /stopping: finishing the message in hand/);
    const end = (await lines(file)).at(-1)!;
    assert.equal(end.event, "end");
    assert.equal(end.state, "stopped");
    const purged = end.counts!.purged!;
    assert.ok(purged >= 20 && purged < many, JSON.stringify(end.counts));
    assert.deepEqual(end.counts, { purged, "not reached": many - purged });
    assert.match(result.stdout, /not done d-\d+ \(sequence number \d+\): not reached \(the run was stopped/);
    assert.equal(
      fixture.broker.counts(QUEUE).deadLettered,
      before - purged,
      "exactly the purged ones are gone",
    );
  });

  it("SIGTERM mid-restore: the send in hand is finished, the rest not reached, the end audited as stopped", async function () {
    const many = 400;
    await takeActive();
    await deadLetterMany(
      fixture.client,
      QUEUE,
      many,
      () => "Restore",
      () => "X",
      5_000,
    );
    const archiveDir = join(dir, "archive-restore");
    const purge = await dlq("purge", "--reason", "Restore", "--yes", "--archive-dir", archiveDir);
    assert.equal(purge.code, 0, purge.stderr);
    const [archive] = await readdir(archiveDir);
    const file = join(dir, "restore-stopped.jsonl");
    const cli = startCli(["dlq", "restore", "--archive", join(archiveDir, archive!), "--audit-file", file], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: QUEUE,
    });
    await waitUntil(() => fixture.broker.counts(QUEUE).active >= 20, "the restore under way", 30_000);
    cli.child.kill("SIGTERM");
    const result = await cli.done;
    assert.equal(result.code, 1, result.stderr);
    assert.match(result.stderr, /stopping: finishing the message in hand/);
    const end = (await lines(file)).at(-1)!;
    assert.equal(end.event, "end");
    assert.equal(end.state, "stopped");
    const restored = end.counts!.restored!;
    assert.ok(restored >= 20 && restored < many, JSON.stringify(end.counts));
    assert.deepEqual(end.counts, { restored, "not reached": many - restored });
    assert.match(result.stdout, /not done d-\d+ \(sequence number \d+\): not reached \(the run was stopped/);
    assert.equal(fixture.broker.counts(QUEUE).active, restored, "exactly the restored ones sent");
  });
});
