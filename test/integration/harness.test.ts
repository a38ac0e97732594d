/**
 * sbinbox-dev/testing's harness, as a team uses it: each outcome it reports comes from the real worker, broker and
 * PostgreSQL, and `stop` (or the process's exit without it) leaves no PostgreSQL running.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { z } from "zod";
import { DoNotRetryError, type MessageHandler } from "sbinbox";
import { startHarness, type Harness } from "sbinbox-dev/testing";
import { memoWritten } from "../fixtures/memo-handlers/index.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const MODULE = "./test/fixtures/memo-handlers/index.ts";

/** Fails `failures` times with a transient error (a 503), then succeeds. */
function flaky(type: string, failures: number): MessageHandler & { calls: number } {
  const handler = {
    kind: "transactional" as const,
    type,
    schema: z.object({ n: z.number() }),
    calls: 0,
    handle() {
      handler.calls += 1;
      if (handler.calls <= failures)
        return Promise.reject(Object.assign(new Error("503 from the stock service"), { status: 503 }));
      return Promise.resolve();
    },
  };
  return handler;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("the test harness (sbinbox-dev/testing)", function () {
  this.timeout(60_000);
  let harness: Harness;
  const twice = flaky("TwiceFlaky", 2);
  const always = flaky("AlwaysFlaky", Number.POSITIVE_INFINITY);
  const refusing: MessageHandler = {
    kind: "transactional",
    type: "Refused",
    schema: z.object({}),
    handle: () => Promise.reject(new DoNotRetryError("never shippable")),
  };
  before(async () => {
    harness = await startHarness({
      module: MODULE,
      handlers: [memoWritten, twice, always, refusing],
      queue: { duplicateDetectionWindowMs: 60_000 },
    });
  });
  after(async () => {
    await harness?.stop();
  });

  it("a published event is committed, its effect readable through db", async () => {
    const id = await harness.publish("MemoWritten", "h-1", { memoId: 101, text: "hello" });
    const outcome = await harness.outcome(id);
    assert.equal(outcome.status, "committed");
    assert.equal(outcome.attempts, 1);
    const { rows } = await harness.db.query<{ text: string }>("SELECT text FROM memos WHERE memo_id = 101");
    assert.deepEqual(rows, [{ text: "hello" }]);
  });

  it("a resend inside the window is dropped by the broker; past it, the inbox finds it a duplicate", async () => {
    const id = await harness.publish("MemoWritten", "h-2", { memoId: 102, text: "once" });
    assert.equal((await harness.outcome(id)).status, "committed");
    const message = { messageId: id, subject: "MemoWritten", body: { memoId: 102, text: "once" } };
    await harness.sendRaw(message);
    assert.equal((await harness.outcome(id)).status, "dropped-by-broker");
    await harness.sendRaw(message, { pastDuplicateWindow: true });
    assert.equal((await harness.outcome(id)).status, "duplicate");
    const { rows } = await harness.db.query<{ n: number }>(
      "SELECT count(*)::integer AS n FROM memos WHERE memo_id = 102",
    );
    assert.deepEqual(rows, [{ n: 1 }]);
  });

  it("a malformed body is dead-lettered with its reason", async () => {
    const id = await harness.sendRaw({
      messageId: "bad-1",
      subject: "MemoWritten",
      body: Buffer.from("{not json"),
    });
    const outcome = await harness.outcome(id);
    assert.equal(outcome.status, "dead-lettered");
    assert.equal(outcome.status === "dead-lettered" && outcome.reason, "UndecodableBody");
  });

  it("a transient failure is retried in place with the policy's delays, then committed", async () => {
    const id = await harness.publish("TwiceFlaky", "t-1", { n: 1 });
    const outcome = await harness.outcome(id);
    assert.equal(outcome.status, "committed");
    assert.equal(outcome.attempts, 3);
    assert.deepEqual(
      outcome.retries.map((r) => [r.attempt, r.how, r.delayMs, r.errorClass]),
      [
        [1, "waited", 100, "transient"],
        [2, "waited", 200, "transient"],
      ],
    );
    assert.match(outcome.retries[0]!.error ?? "", /503 from the stock service/);
  });

  it("a failure that never ends: two waits, a scheduled copy, then RetriesExhausted", async () => {
    const id = await harness.publish("AlwaysFlaky", "t-2", { n: 2 });
    const outcome = await harness.outcome(id);
    assert.equal(outcome.status, "dead-lettered");
    assert.equal(outcome.status === "dead-lettered" && outcome.reason, "RetriesExhausted");
    assert.equal(outcome.attempts, 4);
    assert.deepEqual(
      outcome.retries.map((r) => r.how),
      ["waited", "waited", "scheduled"],
    );
    const scheduled = outcome.retries[2]!.delayMs;
    assert.ok(scheduled > 300 && scheduled <= 500, `the scheduled copy's delay: ${scheduled} ms`);
  });

  it("DoNotRetryError from the team's code: NotRetryable at once", async () => {
    const id = await harness.publish("Refused", "r-1", {});
    const outcome = await harness.outcome(id);
    assert.equal(outcome.status === "dead-lettered" && outcome.reason, "NotRetryable");
    assert.equal(outcome.attempts, 1);
  });

  it("an outcome that never comes rejects naming the message", async () => {
    await assert.rejects(
      harness.outcome("never-sent", { timeoutMs: 200 }),
      /no outcome for message never-sent within 200 ms/,
    );
  });
});

describe("the test harness leaves no process behind", function () {
  this.timeout(60_000);

  it("stop ends the PostgreSQL it started and removes its data", async () => {
    const harness = await startHarness({ module: MODULE });
    const url = new URL(harness.postgresUrl);
    const { rows } = await harness.db.query<{ pid: number; dir: string }>(
      "SELECT pg_backend_pid() AS pid, current_setting('data_directory') AS dir",
    );
    const dir = rows[0]!.dir;
    const postmaster = Number(readFileSync(`${dir}/postmaster.pid`, "utf8").split("\n")[0]);
    assert.ok(alive(postmaster));
    await harness.stop();
    await harness.stop();
    assert.ok(!alive(postmaster), "PostgreSQL still runs");
    assert.ok(!existsSync(dir), "its data is left");
    assert.ok(url.port);
  });

  it("a test process that exits without stop (a failed test, a forgotten hook) still ends its PostgreSQL", async () => {
    const script = `
      import { startHarness } from "sbinbox-dev/testing";
      const harness = await startHarness({ module: "${MODULE}" });
      const { rows } = await harness.db.query("SELECT current_setting('data_directory') AS dir");
      process.stdout.write(rows[0].dir + "\\n");
      process.exit(1);
    `;
    const result = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script], {
      cwd: root,
    }).then(
      () => assert.fail("the script should exit 1"),
      (error: { code: number; stdout: string }) => error,
    );
    assert.equal(result.code, 1);
    const dir = result.stdout.trim().split("\n").at(-1)!;
    assert.match(dir, /sbinbox-pg-/);
    assert.ok(!existsSync(dir), "the PostgreSQL data is left behind");
    const { stdout } = await promisify(execFile)("ps", ["-eo", "args"]);
    assert.ok(!stdout.includes(dir), `a process still runs on ${dir}`);
  });

  it("a test process ended by SIGTERM (a runner killed, a CI timeout) stops its PostgreSQL and removes its data", async () => {
    const script = `
      import { startHarness } from "sbinbox-dev/testing";
      const harness = await startHarness({ module: "${MODULE}" });
      const { rows } = await harness.db.query("SELECT current_setting('data_directory') AS dir");
      process.stdout.write(rows[0].dir + "\\n");
    `;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { cwd: root });
    let stdout = "";
    child.stdout.setEncoding("utf8");
    const printed = new Promise<string>((resolve) =>
      child.stdout.on("data", (chunk: string) => {
        stdout += chunk;
        if (stdout.includes("\n")) resolve(stdout.trim());
      }),
    );
    const exited = once(child, "exit") as Promise<[number | null, NodeJS.Signals | null]>;
    const dir = await Promise.race([
      printed,
      exited.then(() => assert.fail(`the script ended early: ${stdout}`)),
    ]);
    assert.match(dir, /sbinbox-pg-/);
    assert.ok(existsSync(dir), "the harness's data folder exists while it runs");
    child.kill("SIGTERM");
    const [code, signal] = await exited;
    assert.deepEqual(
      [code, signal],
      [null, "SIGTERM"],
      "the signal is raised again once PostgreSQL is stopped",
    );
    assert.ok(!existsSync(dir), "the PostgreSQL data is left behind");
    const { stdout: ps } = await promisify(execFile)("ps", ["-eo", "args"]);
    assert.ok(!ps.includes(dir), `a process still runs on ${dir}`);
  });
});
