/**
 * The archive in Azure, on real parts: the real @azure/storage-blob client against Azurite (an npm package, run on
 * 127.0.0.1), the console service over the local broker through the real @azure/service-bus SDK. A purge writes
 * each message to its own blob before it deletes it; a refused write (the operator without Storage Blob Data
 * Contributor) deletes nothing; the records restore as replay copies. Azurite is given its well-known account key,
 * here only: in Azure the account refuses keys and the operator's Entra ID identity writes (docs/operations.md).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import { promisify } from "node:util";
import { ContainerClient } from "@azure/storage-blob";
import {
  createConsoleService,
  type AuditEvent,
  type ConsoleService,
  type Job,
} from "../../src/console/service.ts";
import { peekDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { archiveRecord, restoreArchived } from "../../src/servicebus/dead-letter-archive.ts";
import { openBlobArchive, readBlobArchive } from "../../src/servicebus/dead-letter-blob-archive.ts";
import { restoreMessageId } from "../../src/servicebus/message-id.ts";
import { useAzurite } from "../helpers/azurite.ts";
import { runCli } from "../helpers/cli.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { deadLetterMany } from "../helpers/dead-letters.ts";

const QUEUE = "archived";
const run = promisify(execFile);
const OPERATOR = "alice@contoso.example (00000000-0000-4000-8000-0000000000a1)";

async function ended(service: ConsoleService, job: Job): Promise<Job> {
  await waitUntil(() => service.job(job.id)?.state !== "running", `job ${job.id} ended`, 60_000);
  return service.job(job.id)!;
}

describe("the dead-letter archive in a blob container (Azurite, the real @azure/storage-blob client)", function () {
  this.timeout(120_000);
  const azurite = useAzurite();
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { MaxDeliveryCount: 100 } }));
  let container: ContainerClient;
  const events: AuditEvent[] = [];

  const serviceWith = (archiveContainer: ContainerClient) =>
    createConsoleService({
      client: fixture.client,
      entity: QUEUE,
      audit: (e) => events.push(e),
      archive: (who) => openBlobArchive(archiveContainer, QUEUE, who),
    });

  before(async function () {
    container = new ContainerClient(azurite.connectionString(), "dlq-archive");
    await container.create();
    await deadLetterMany(
      fixture.client,
      QUEUE,
      5,
      () => "RetriesExhausted",
      () => "Order",
    );
  });

  it("writes each purged message to its own blob before deleting it, named by the run and its place", async function () {
    const service = serviceWith(container);
    const all = await peekDeadLetters(fixture.client, QUEUE);
    const chosen = all.slice(1, 4);
    const plan = await service.plan(
      "purge",
      { sequenceNumbers: chosen.map((m) => m.sequenceNumber) },
      OPERATOR,
    );
    const job = await ended(service, service.run(plan.token, OPERATOR));
    assert.deepEqual(job.counts, { purged: 3 }, JSON.stringify(job));

    // The run's prefix: <entity>/<day>/<run>/, under the container's URL.
    const prefix = job.archive!.slice(container.url.length + 1);
    assert.match(prefix, new RegExp(`^${QUEUE}/\\d{4}-\\d{2}-\\d{2}/[0-9a-f-]{36}/$`));
    const names: string[] = [];
    for await (const blob of container.listBlobsFlat({ prefix })) names.push(blob.name);
    assert.deepEqual(names, [`${prefix}000001.json`, `${prefix}000002.json`, `${prefix}000003.json`]);

    const records = await readBlobArchive(container, prefix);
    assert.deepEqual(
      records.map((r) => [
        r.messageId,
        r.operator,
        r.reason,
        r.entity,
        Buffer.from(r.body, "base64").toString(),
      ]),
      chosen.map((m) => [
        m.messageId,
        OPERATOR,
        "RetriesExhausted",
        QUEUE,
        JSON.stringify({ n: Number(m.messageId.slice(2)) }),
      ]),
    );
    // The audit's "path and line" name the blob.
    const results = events.filter((e) => e.event === "result" && e.job === job.id) as {
      archived?: { path: string; line: number };
    }[];
    assert.deepEqual(
      results.map((r) => `${r.archived!.path}${String(r.archived!.line).padStart(6, "0")}.json`),
      names.map((n) => `${container.url}/${n}`),
    );
    const left = await peekDeadLetters(fixture.client, QUEUE);
    assert.deepEqual(
      left.map((m) => m.messageId),
      all.filter((m) => !chosen.includes(m)).map((m) => m.messageId),
    );

    // Restored from the blobs: replay copies keyed by their originals.
    const sender = fixture.client.createSender(QUEUE);
    try {
      for (const record of records)
        assert.equal(
          await restoreArchived(sender, record),
          restoreMessageId(record.inboxKey, record.replay + 1, record),
        );
    } finally {
      await sender.close();
    }
    const receiver = fixture.client.createReceiver(QUEUE, {
      receiveMode: "receiveAndDelete",
      skipParsingBodyAsJson: true,
    });
    try {
      const got = await receiver.receiveMessages(10, { maxWaitTimeInMs: 2_000 });
      assert.deepEqual(
        got
          .map((m) => [
            m.applicationProperties?.["sbinbox-original-key"],
            Buffer.from(m.body as Buffer).toString(),
          ])
          .sort(),
        chosen.map((m) => [m.messageId, JSON.stringify({ n: Number(m.messageId.slice(2)) })]).sort(),
      );
    } finally {
      await receiver.close();
    }
  });

  it("a refused archive write (no Storage Blob Data Contributor) deletes nothing and says which role is missing", async function () {
    // The wrong key stands for an identity without the role: the service answers 403 either way.
    const wrongKey = Buffer.alloc(64, 7).toString("base64");
    const refused = new ContainerClient(azurite.connectionString(wrongKey), "dlq-archive");
    const service = serviceWith(refused);
    const before = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(before.length, 2);
    const plan = await service.plan("purge", { sequenceNumbers: [before[0]!.sequenceNumber] }, OPERATOR);
    const job = await ended(service, service.run(plan.token, OPERATOR));
    assert.equal(job.state, "failed");
    assert.match(
      job.error ?? "",
      /refused alice@contoso\.example .*\(403 .*Storage Blob Data Contributor.*nothing was deleted/,
    );
    assert.deepEqual(job.counts, { failed: 1 });
    const after = await peekDeadLetters(fixture.client, QUEUE);
    assert.deepEqual(
      after.map((m) => m.messageId),
      before.map((m) => m.messageId),
      "still dead-lettered",
    );
    const names: string[] = [];
    for await (const blob of container.listBlobsFlat()) names.push(blob.name);
    assert.equal(names.length, 3, "nothing new in the archive");
  });

  it("never overwrites an archived blob: a write to a name that exists is refused (If-None-Match: *)", async function () {
    // Another day than today's, whose prefix the crash test reads whole: this blob is no record.
    const fixedRun = openBlobArchive(container, QUEUE, OPERATOR, () => new Date("2019-01-01T00:00:00Z"));
    const prefix = fixedRun.path.slice(container.url.length + 1);
    await container.getBlockBlobClient(`${prefix}000001.json`).upload("{}", 2);
    const [dead] = await peekDeadLetters(fixture.client, QUEUE, { max: 1 });
    const receiver = fixture.client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
    try {
      const [message] = await receiver.peekMessages(1);
      await assert.rejects(
        async () => fixedRun.append(message!, dead!),
        /already holds that blob \(409 BlobAlreadyExists\); nothing was deleted/,
      );
    } finally {
      await receiver.close();
    }
    const kept = await container.getBlockBlobClient(`${prefix}000001.json`).downloadToBuffer();
    assert.equal(kept.toString(), "{}");
  });

  it("a retried write that meets its own blob (409, the same bytes: the first PUT landed) is a success, not a stop", async function () {
    const at = new Date("2020-01-01T00:00:00.000Z");
    const retried = openBlobArchive(container, QUEUE, OPERATOR, () => at);
    const prefix = retried.path.slice(container.url.length + 1);
    const [dead] = await peekDeadLetters(fixture.client, QUEUE, { max: 1 });
    const receiver = fixture.client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
    try {
      const [message] = await receiver.peekMessages(1);
      // What the first, acknowledged-but-unanswered PUT left: exactly the record this append writes.
      const text = JSON.stringify(archiveRecord(message!, dead!, { entity: QUEUE, operator: OPERATOR, at }));
      await container.getBlockBlobClient(`${prefix}000001.json`).upload(text, Buffer.byteLength(text));
      assert.equal(await retried.append(message!, dead!), 1);
      assert.equal(await retried.append(message!, dead!), 2, "the run goes on at the next place");
      const kept = await container.getBlockBlobClient(`${prefix}000001.json`).downloadToBuffer();
      assert.equal(kept.toString(), text);
    } finally {
      await receiver.close();
    }
  });

  it("a crash between the blob write and the delete: the message stays dead-lettered, the next purge archives it again, a restore of both sends one MessageId twice", async function () {
    const [dead] = await peekDeadLetters(fixture.client, QUEUE, { max: 1 });
    const receiver = fixture.client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
    const [message] = await receiver.peekMessages(1).finally(() => receiver.close());
    // The crashed run: its blob was acknowledged, its delete never happened.
    await openBlobArchive(container, QUEUE, OPERATOR).append(message!, dead!);
    assert.ok(
      (await peekDeadLetters(fixture.client, QUEUE)).some((m) => m.messageId === dead!.messageId),
      "still dead-lettered after the crash",
    );
    const service = serviceWith(container);
    const plan = await service.plan("purge", { sequenceNumbers: [dead!.sequenceNumber] }, OPERATOR);
    const job = await ended(service, service.run(plan.token, OPERATOR));
    assert.deepEqual(job.counts, { purged: 1 }, JSON.stringify(job));

    // The day's prefix holds both records, oldest first (by archivedAt, not by the runs' random ids).
    const day =
      job
        .archive!.slice(container.url.length + 1)
        .split("/")
        .slice(0, 2)
        .join("/") + "/";
    const records = await readBlobArchive(container, day);
    const times = records.map((r) => Date.parse(r.archivedAt));
    assert.deepEqual(
      times,
      [...times].sort((a, b) => a - b),
      "in archived order",
    );
    const twice = records.filter((r) => r.messageId === dead!.messageId);
    assert.equal(twice.length, 2);
    assert.equal(twice[0]!.inboxKey, twice[1]!.inboxKey);

    // Restored, both copies carry the same MessageId and inbox key: duplicate detection drops the second within its
    // window, and the worker's inbox applies the key at most once after it.
    const sender = fixture.client.createSender(QUEUE);
    let ids: string[];
    try {
      ids = [await restoreArchived(sender, twice[0]!), await restoreArchived(sender, twice[1]!)];
    } finally {
      await sender.close();
    }
    assert.equal(ids[0], ids[1]);
    assert.equal(ids[0], restoreMessageId(dead!.messageId, 1, twice[0]!));
    const drain = fixture.client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
    try {
      const got = await drain.receiveMessages(10, { maxWaitTimeInMs: 2_000 });
      assert.ok(got.length >= 1);
      for (const copy of got) assert.equal(copy.messageId, ids[0]);
    } finally {
      await drain.close();
    }
  });
});

/**
 * The CLI's own blob path: `sbinbox dlq purge --archive-url https://…` and `sbinbox dlq restore --archive https://…`
 * as a subprocess, against Azurite over HTTPS (a certificate made here, trusted through NODE_EXTRA_CA_CERTS) with
 * `--oauth basic`, so the CLI sends the bearer token its credential got from a stand-in `az` (the real
 * AzureCliCredential, the real @azure/storage-blob client): the way the CLI allows, https only and no key.
 */
describe("sbinbox dlq purge --archive-url and restore --archive against Azurite over HTTPS with a bearer token", function () {
  this.timeout(120_000);
  const queue = "archived-cli";
  let dir: string;
  let cert: { cert: string; key: string };
  before(async function () {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-azurite-tls-"));
    cert = { cert: join(dir, "cert.pem"), key: join(dir, "key.pem") };
    await run("openssl", [
      ...["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"],
      ...["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", cert.key, "-out", cert.cert],
    ]);
    // This process trusts it too, to create the container and read the blobs with the account key.
    tls.setDefaultCACertificates([...tls.getCACertificates("default"), await readFile(cert.cert, "utf8")]);
    const token = jwt({
      aud: "https://storage.azure.com",
      iss: "https://sts.windows.net/00000000-0000-4000-8000-0000000000e1/",
      upn: "alice@contoso.example",
      oid: "00000000-0000-4000-8000-0000000000a1",
      iat: Math.floor(Date.now() / 1000) - 60,
      nbf: Math.floor(Date.now() / 1000) - 60,
      exp: Math.floor(Date.now() / 1000) + 3600,
    });
    const expires = Math.floor(Date.now() / 1000) + 3600;
    await writeFile(
      join(dir, "az"),
      `#!/bin/sh\necho "$*" >> "${join(dir, "az.calls")}"\necho '{"accessToken":"${token}","expires_on":${expires},"tokenType":"Bearer"}'\n`,
      { mode: 0o755 },
    );
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  const azurite = useAzurite({ tls: () => cert, oauth: true });
  const fixture = useLocalBroker(brokerConfig({ [queue]: { MaxDeliveryCount: 100 } }));
  const dlq = (...args: string[]) =>
    runCli(["dlq", ...args], {
      PATH: `${dir}:${process.env.PATH}`,
      NODE_EXTRA_CA_CERTS: cert.cert,
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: queue,
    });

  it("purges into the container with the operator's token and restores from its URL", async function () {
    const container = new ContainerClient(azurite.connectionString(), "dlq-archive");
    await container.create();
    await deadLetterMany(
      fixture.client,
      queue,
      2,
      () => "RetriesExhausted",
      () => "Order",
    );
    const url = `${azurite.blobEndpoint}/dlq-archive`;
    assert.match(url, /^https:\/\//);

    // The audit file and --operator (a local broker's) work with the blob archive as with the local one.
    const auditFile = join(dir, "audit.jsonl");
    const purge = await dlq(
      ...["purge", "--reason", "RetriesExhausted", "--yes", "--archive-url", url],
      ...["--operator", "erin", "--audit-file", auditFile],
    );
    assert.equal(purge.code, 0, `${purge.stderr}\n${purge.stdout}`);
    assert.match(purge.stdout, /purged 2 message/);
    assert.equal(fixture.broker.counts(queue).deadLettered, 0);
    const names: string[] = [];
    for await (const blob of container.listBlobsFlat({ prefix: `${queue}/` })) names.push(blob.name);
    assert.equal(names.length, 2, names.join(", "));
    // The write went with the bearer token the stand-in az gave for Storage (no key: the CLI has none).
    assert.match(await readFile(join(dir, "az.calls"), "utf8"), /get-access-token.*storage\.azure\.com/);

    const restored = await dlq(
      ...["restore", "--archive", `${url}/${queue}/`],
      ...["--operator", "erin", "--audit-file", auditFile],
    );
    assert.equal(restored.code, 0, restored.stderr);
    assert.equal(restored.stdout.match(/^restored \S+ as \S+$/gm)?.length, 2, restored.stdout);
    const lines = (await readFile(auditFile, "utf8"))
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { event: string; action: string; operator: string; result?: string });
    assert.deepEqual(
      lines.map((l) => `${l.action} ${l.event}${l.result ? ` ${l.result}` : ""}`),
      [
        ...["purge plan", "purge run", "purge result purged", "purge result purged", "purge end"],
        ...[
          "restore plan",
          "restore run",
          "restore result restored",
          "restore result restored",
          "restore end",
        ],
      ],
    );
    assert.ok(lines.every((l) => l.operator === "erin"));
    await waitUntil(
      () => fixture.broker.counts(queue).active === 2,
      "two replay copies on the queue",
      10_000,
    );

    // Plain HTTP is refused before anything is read or sent.
    const plain = await dlq("restore", "--archive", url.replace("https://", "http://"));
    assert.notEqual(plain.code, 0);
    assert.match(plain.stderr, /the archive URL must be https:\/\//);
    assert.equal(fixture.broker.counts(queue).active, 2, "nothing more sent");
  });
});

function jwt(claims: Record<string, unknown>): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  return `${part({ alg: "RS256", typ: "JWT" })}.${part(claims)}.c2lnbmF0dXJl`;
}
