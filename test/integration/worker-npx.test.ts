import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Database } from "../../src/app/database.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { cleanEnv } from "../helpers/cli.ts";
import { countCredits, exampleDatabase } from "../helpers/worker.ts";

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));

/** A process's parent and state from /proc (Linux); undefined once it is gone. */
function procStat(pid: number): { ppid: number; state: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // After the command's name, which is in parentheses and may hold spaces.
    const [state, ppid] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { ppid: Number(ppid), state: state! };
  } catch {
    return undefined;
  }
}

/** The worker's first JSON log line with this message. */
function logLine(output: string, msg: string): Record<string, unknown> {
  for (const line of output.split("\n")) {
    if (!line.startsWith("{")) continue;
    const entry = JSON.parse(line) as Record<string, unknown>;
    if (entry.msg === msg) return entry;
  }
  throw new Error(`no log line "${msg}" in: ${output.slice(-1500)}`);
}

describe("`npx sbinbox worker`: a SIGTERM sent to npm alone", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker();
  let db: Database & { url: string };
  let worker: number | undefined;
  before(async () => {
    db = await exampleDatabase("worker_npx");
  });
  after(async () => {
    // Without the watch this is the orphan the test found: it must not outlive the test.
    if (worker !== undefined && procStat(worker)?.state !== "Z") process.kill(worker, "SIGKILL");
    await db?.close();
  });

  it("stops the worker too (npm passes it to its shell only, which dies of it): gracefully, its work applied", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: "sbinbox" });
    await publisher.publishBatch([0, 1, 2].map((i) => demoEvent("npx", i)));
    await publisher.close();
    // npm itself, as `npx` runs it: the one that ran this test when there is one, else the one on PATH.
    const npm = process.env.npm_execpath
      ? { command: process.execPath, args: [process.env.npm_execpath] }
      : { command: "npm", args: [] };
    const child = spawn(npm.command, [...npm.args, "exec", "--", "sbinbox", "worker"], {
      cwd: repoRoot,
      env: cleanEnv({
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
        SBINBOX_POSTGRES_URL: db.url,
        PORT: "0",
        SBINBOX_HTTP_HOST: "127.0.0.1",
      }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.stdout.resume();
    // The pipe closes when its last writer, the worker, has exited: npm exiting alone does not close it.
    let closed = false;
    child.stderr.on("close", () => (closed = true));
    await waitUntil(() => /"msg":"worker ready"/.test(stderr), "the worker is ready", 40_000);
    worker = logLine(stderr, "worker ready").pid as number;
    const shell = procStat(worker)!.ppid;
    assert.notEqual(shell, child.pid, "a shell stands between npm and the worker");
    assert.equal(procStat(shell)?.ppid, child.pid, "npm's child is the worker's parent");
    for (let i = 0; i < 100 && (await countCredits(db)) < 3; i++)
      await new Promise((r) => setTimeout(r, 100));
    assert.equal(await countCredits(db), 3, "the worker is working before the signal");

    child.kill("SIGTERM");
    await waitUntil(() => child.exitCode !== null || child.signalCode !== null, "npm exits", 10_000);
    await waitUntil(() => closed, `the worker exits after npm (stderr: ${stderr.slice(-1500)})`, 20_000);
    assert.match(stderr, /the npm process that started this worker is gone/);
    assert.equal(logLine(stderr, "stopping gracefully").signal, "npm exited");
    assert.match(stderr, /"msg":"stopped"/);
    const left = procStat(worker);
    assert.ok(left === undefined || left.state === "Z", `the worker is gone (${JSON.stringify(left)})`);
  });
});
