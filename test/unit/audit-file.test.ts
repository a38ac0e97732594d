import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { openAuditFile } from "../../src/cli/audit-file.ts";
import { createAudit } from "../../src/cli/console-audit.ts";
import { operatorIdentity } from "../../src/cli/operator.ts";
import { createLogger } from "../../src/telemetry/logger.ts";

describe("the durable audit file: append-only JSON lines, a plan never unrecorded", function () {
  let dir: string;
  before(async () => (dir = await mkdtemp(join(tmpdir(), "sbinbox-audit-"))));
  after(async () => rm(dir, { recursive: true, force: true }));

  it("appends after what the file holds, one JSON line an event, created 0600", async function () {
    const path = join(dir, "a.jsonl");
    await writeFile(path, '{"earlier":true}\n', { mode: 0o600 });
    const file = openAuditFile(path, () => new Date("2026-01-02T03:04:05Z"));
    const audit = createAudit(createLogger({ write: () => undefined }), { component: "dlq", file });
    audit({ event: "run", operator: "bob", action: "purge", entity: "q", job: "j", count: 1 });
    file.close();
    const lines = (await readFile(path, "utf8")).trim().split("\n");
    assert.equal(lines.length, 2);
    assert.deepEqual(JSON.parse(lines[1]!), {
      time: "2026-01-02T03:04:05.000Z",
      component: "dlq",
      event: "run",
      operator: "bob",
      action: "purge",
      entity: "q",
      job: "j",
      count: 1,
      osUser: userInfo().username,
    });
    const fresh = join(dir, "b.jsonl");
    openAuditFile(fresh).close();
    assert.equal((await stat(fresh)).mode & 0o777, 0o600);
  });

  it("a plan or run whose line cannot be written throws; a result's failure is reported, not thrown", function () {
    const reported: string[] = [];
    const broken = {
      path: "/full",
      write() {
        throw new Error("ENOSPC: no space left on device");
      },
      close() {},
    };
    const audit = createAudit(createLogger({ write: () => undefined }), {
      file: broken,
      onFileError: (e) => reported.push(e.message),
    });
    const base = { operator: "bob", action: "purge" as const, entity: "q" };
    assert.throws(() => audit({ event: "plan", ...base, count: 0, messages: [] }), /ENOSPC/);
    assert.throws(() => audit({ event: "run", ...base, job: "j", count: 0 }), /ENOSPC/);
    audit({ event: "result", ...base, job: "j", sequenceNumber: "1", messageId: "m", result: "purged" });
    assert.deepEqual(reported, ["ENOSPC: no space left on device"]);
  });

  it("names the operator given, else the OS user; refuses a blank or control-character name", function () {
    assert.equal(operatorIdentity(" alice "), "alice");
    assert.ok(operatorIdentity().length > 0);
    assert.throws(() => operatorIdentity(""), /--operator "" must be a name/);
    assert.throws(() => operatorIdentity("bob\nmallory"), /must be a name/);
  });
});
