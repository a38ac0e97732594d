import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import { openArchive, readArchive } from "../../src/servicebus/dead-letter-archive.ts";
import type { DeadLetter } from "../../src/servicebus/dead-letter.ts";

// The archive holds unmasked bodies: it must be the operator's alone, on a real file system.
describe("the purge archive is private to the operator", function () {
  let root: string;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), "sbinbox-archive-mode-"));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  const message = { body: Buffer.from('{"email":"a@example.com"}'), applicationProperties: {} };
  const info: DeadLetter = {
    sequenceNumber: "7",
    messageId: "m-7",
    inboxKey: "m-7",
    replay: 0,
    deliveryCount: 1,
    state: "active",
  };

  it("creates the directory 0700 and the day's file 0600, and the line reads back", async function () {
    const dir = join(root, "new", "archive");
    const archive = openArchive(dir, "orders", "alice");
    await archive.append(message as unknown as ServiceBusReceivedMessage, info);
    assert.equal((statSync(dir).mode & 0o777).toString(8), "700");
    assert.equal((statSync(archive.path).mode & 0o777).toString(8), "600");
    await archive.append(message as unknown as ServiceBusReceivedMessage, { ...info, messageId: "m-8" });
    assert.deepEqual(
      readArchive(archive.path).map((r) => r.messageId),
      ["m-7", "m-8"],
    );
  });

  for (const mode of [0o755, 0o770, 0o703]) {
    it(`refuses an existing directory of mode ${mode.toString(8)}, naming it and what to do`, function () {
      const dir = join(root, "shared");
      openArchive(dir, "orders", "alice");
      chmodSync(dir, mode);
      assert.throws(
        () => openArchive(dir, "orders", "alice"),
        (e: Error) =>
          e.message.includes(dir) &&
          e.message.includes(`mode ${mode.toString(8)}`) &&
          /unmasked bodies; run chmod 700/.test(e.message),
      );
    });
  }
});
