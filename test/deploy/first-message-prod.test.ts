/**
 * infra/scripts/first-message.sh, the deploy workflow's "first message" step (prod: on the VNet runner, as the app
 * identity the Bicep lists in `publishers`): it publishes one NoteCreated with `sbinbox publish` and waits for the
 * queue to hold nothing active or scheduled, failing by name when the dead-letter count rises or the wait runs out.
 * Real parts where they exist here: the local broker (the real SDK over AMQP), a real worker with the example
 * handlers on PostgreSQL, which writes the note. Only `az servicebus queue show` (the queue's counts, read from ARM)
 * is a stand-in, answering the counts a test gives it.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import notes from "../../handlers/index.ts";
import { openDatabase, type Database } from "../../src/app/database.ts";
import { moduleMigrations } from "../../src/app/handler-module.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker } from "../helpers/broker.ts";
import { cleanEnv } from "../helpers/cli.ts";
import { waitUntilAsync } from "../helpers/http.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { startTestWorker } from "../helpers/worker.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const script = join(root, "infra/scripts/first-message.sh");

describe("infra/scripts/first-message.sh: the first message in prod, published and seen applied", function () {
  this.timeout(120_000);
  const fixture = useLocalBroker(
    brokerConfig({ notes: { LockDuration: "PT1M", MaxDeliveryCount: 10, RequiresDuplicateDetection: true } }),
  );
  let dir: string;
  let db: Database;
  let worker: Worker | undefined;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-first-message-prod-"));
    // Answers the queue's counts in turn from STANDIN_COUNTS ("active,scheduled,dead" ...), the last one repeated.
    await writeFile(
      join(dir, "az"),
      `#!/usr/bin/env bash
echo "az $*" >> "$STANDIN_LOG"
n=$(( $(cat "$STANDIN_DIR/calls" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$STANDIN_DIR/calls"
read -r -a counts <<< "$STANDIN_COUNTS"
i=$(( n <= \${#counts[@]} ? n - 1 : \${#counts[@]} - 1 ))
printf '%s\\n' "\${counts[$i]}" | tr ',' '\\t'
`,
    );
    await chmod(join(dir, "az"), 0o755);
    db = await openDatabase(
      { kind: "postgres", url: await createTestDatabase("first_message_prod") },
      { preCheck: true, maxConnections: 4 },
    );
    await db.store.migrate(await moduleMigrations(notes, db.dialect));
    worker = startTestWorker({
      client: fixture.client,
      db,
      queue: "notes",
      consumer: "notes-worker",
      handlers: await notes.handlers(),
    });
  });

  after(async () => {
    await worker?.stop();
    await db?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  function start(
    env: Record<string, string>,
  ): Promise<{ code: number; stdout: string; stderr: string; log: string[] }> {
    return new Promise((resolve) => {
      void rm(join(dir, "calls"), { force: true }).then(() =>
        execFile(
          "bash",
          [script],
          {
            env: cleanEnv({
              PATH: `${dir}:${process.env.PATH ?? ""}`,
              STANDIN_LOG: join(dir, "log"),
              STANDIN_DIR: dir,
              SBINBOX_PACKAGE_DIR: root,
              // The deployment's outputs, as the app job takes them (the namespace's name from its host name).
              azure_resource_group: "rg-sbinbox-prod",
              SERVICEBUS_NAMESPACE: "sb-sbinbox-x.servicebus.windows.net",
              SERVICEBUS_QUEUE: "notes",
              SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
              FIRST_MESSAGE_POLL_SECONDS: "0",
              FIRST_MESSAGE_SETTLE_SECONDS: "0",
              ...env,
            }),
          },
          (error, stdout, stderr) => {
            void readFile(join(dir, "log"), "utf8")
              .catch(() => "")
              .then((log) =>
                resolve({
                  code: error ? Number((error as { code?: number }).code ?? 1) : 0,
                  stdout,
                  stderr,
                  log: log.trim().split("\n").filter(Boolean),
                }),
              );
          },
        ),
      );
    });
  }

  it("publishes a NoteCreated that the worker applies, and says so once the queue is drained", async function () {
    await rm(join(dir, "log"), { force: true });
    // Before the publish, then: a 0 (not trusted alone), the message seen, a 0, and the confirming 0.
    const result = await start({
      FIRST_MESSAGE_NOTE_ID: "4242",
      STANDIN_COUNTS: "0,0,0 0,0,0 1,0,0 0,0,0 0,0,0",
    });
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /published 1 events to notes/);
    assert.match(result.stdout, /note 4242 applied .*read twice/);
    const show =
      "az servicebus queue show --resource-group rg-sbinbox-prod --namespace-name sb-sbinbox-x --name notes --output tsv --query [countDetails.activeMessageCount, countDetails.scheduledMessageCount, countDetails.deadLetterMessageCount]";
    assert.deepEqual(result.log, [show, show, show, show, show]);
    let rows: { note_id: string; text: string }[] = [];
    await waitUntilAsync(
      async () => {
        rows = (
          await db.sql.query<{ note_id: string; text: string }>(
            "SELECT note_id, text FROM notes WHERE note_id = 4242",
          )
        ).rows;
        return rows.length > 0;
      },
      "the worker writes the note",
      30_000,
    );
    assert.equal(rows[0]!.text, "first message");
    assert.deepEqual(await takeDeadLetters(fixture.client, "notes"), [], "nothing dead-lettered");
  });

  it("fails by name when the dead-letter count rises", async function () {
    const result = await start({ FIRST_MESSAGE_NOTE_ID: "4243", STANDIN_COUNTS: "0,0,2 0,0,3" });
    assert.equal(result.code, 1);
    assert.match(
      result.stderr,
      /dead-letter count rose from 2 to 3: the message was not applied; its reason: sbinbox dlq list/,
    );
  });

  it("fails by name when the message is not applied in time (a retry scheduled instead counts as not applied)", async function () {
    const result = await start({
      FIRST_MESSAGE_NOTE_ID: "4244",
      FIRST_MESSAGE_WAIT_SECONDS: "0",
      STANDIN_COUNTS: "0,0,0 0,1,0",
    });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /not applied after 0s \(0 active, 1 scheduled on notes\)/);
  });

  it("does not trust a first 0 from the management plane: the confirming reading found the message, so not applied", async function () {
    const result = await start({
      FIRST_MESSAGE_NOTE_ID: "4246",
      FIRST_MESSAGE_WAIT_SECONDS: "0",
      STANDIN_COUNTS: "0,0,0 0,0,0 1,0,0",
    });
    assert.equal(result.code, 1, result.stdout);
    assert.doesNotMatch(result.stdout, /applied/);
    assert.match(result.stderr, /not applied after 0s \(1 active, 0 scheduled on notes\)/);
  });

  it("stops by name when the queue's counts cannot be read (no Reader), before publishing", async function () {
    const result = await start({ FIRST_MESSAGE_NOTE_ID: "4245", STANDIN_COUNTS: "denied" });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /could not read the counts of queue notes .*needs Reader on rg-sbinbox-prod/);
    assert.doesNotMatch(result.stdout, /published/);
  });

  it("refuses to start without the deployment's outputs or with a note id that is not a number", async function () {
    const missing = await start({ SERVICEBUS_QUEUE: "" });
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /SERVICEBUS_QUEUE is not set/);
    const bad = await start({ FIRST_MESSAGE_NOTE_ID: "1; rm -rf /", STANDIN_COUNTS: "0,0,0" });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /FIRST_MESSAGE_NOTE_ID must be a whole number/);
  });
});
