/**
 * `sbinbox worker` calls the handler module's `stop` at shutdown (SIGTERM), once, after the worker has stopped
 * handling messages: a module closes its own pool there (docs/handlers.md, "A module's stop").
 */
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { migrate } from "../../src/app/migrate.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { startCli } from "../helpers/cli.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const QUEUE = "stopping";
const MODULE = "./test/fixtures/stopping-handlers/index.ts";

describe("sbinbox worker and the module's stop", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-worker-stop-"));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("is called once at SIGTERM, after the message was handled, and the worker exits 0", async () => {
    const url = await createTestDatabase("worker_module_stop");
    await migrate({ database: { kind: "postgres", url }, module: MODULE });
    const stopFile = join(dir, "stop.log");
    const { child, done } = startCli(["worker"], {
      SBINBOX_HANDLERS: MODULE,
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_POSTGRES_URL: url,
      SBINBOX_QUEUE: QUEUE,
      SBINBOX_HTTP_HOST: "127.0.0.1",
      PORT: "0",
      SBINBOX_TEST_STOP_FILE: stopFile,
    });
    const pg = await import("pg");
    const db = new pg.default.Client({ connectionString: url });
    await db.connect();
    try {
      await sendRawMessages(fixture.client, QUEUE, [
        { messageId: "memo-1", subject: "MemoWritten", body: Buffer.from('{"memoId":1,"text":"x"}') },
      ]);
      const deadline = Date.now() + 30_000;
      let rows = 0;
      while (rows === 0 && child.exitCode === null && Date.now() < deadline) {
        rows = (await db.query("SELECT 1 FROM memos WHERE memo_id = 1")).rowCount ?? 0;
        if (rows === 0) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.equal(rows, 1, "the memo is written");
    } finally {
      await db.end();
      child.kill("SIGTERM");
    }
    const result = await done;
    assert.equal(result.code, 0, result.stderr.slice(-2000));
    assert.equal(await readFile(stopFile, "utf8"), "stopped after 1 handled\n");
  });
});
