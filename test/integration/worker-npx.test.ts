import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Database } from "../../src/app/database.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
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

/** `npx sbinbox <command>`, as a team starts it, once the process npm runs it in has logged `ready`. */
interface NpxRun {
  readonly npm: ChildProcess;
  /** The sbinbox process (npm's grandchild). */
  readonly pid: number;
  stderr(): string;
  /** Whether its stderr closed: its last writer, the sbinbox process, has exited (npm exiting alone does not). */
  closed(): boolean;
}

const started: number[] = [];

async function npxSbinbox(
  command: string,
  env: Record<string, string>,
  ready: string,
  options: { group?: boolean } = {},
): Promise<NpxRun> {
  // npm itself, as `npx` runs it: the one that ran this test when there is one, else the one on PATH.
  const npm = process.env.npm_execpath
    ? { command: process.execPath, args: [process.env.npm_execpath] }
    : { command: "npm", args: [] };
  const child = spawn(npm.command, [...npm.args, "exec", "--", "sbinbox", command], {
    cwd: repoRoot,
    env: cleanEnv({ PORT: "0", SBINBOX_HTTP_HOST: "127.0.0.1", ...env }),
    stdio: ["ignore", "pipe", "pipe"],
    // Its own process group, as a terminal's foreground job is: a Ctrl-C goes to the whole group.
    detached: options.group === true,
  });
  let stderr = "";
  let closed = false;
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  child.stderr.on("close", () => (closed = true));
  child.stdout.resume();
  await waitUntil(() => stderr.includes(`"msg":"${ready}"`), `sbinbox ${command} is ready`, 40_000);
  const pid = logLine(stderr, ready).pid as number;
  started.push(pid);
  const shell = procStat(pid)!.ppid;
  assert.notEqual(shell, child.pid, "a shell stands between npm and sbinbox");
  assert.equal(procStat(shell)?.ppid, child.pid, "npm's child is sbinbox's parent");
  return { npm: child, pid, stderr: () => stderr, closed: () => closed };
}

/** Sends SIGTERM to npm alone and waits for npm, then the sbinbox process, to exit. */
async function terminateNpm(run: NpxRun): Promise<void> {
  run.npm.kill("SIGTERM");
  await waitUntil(() => run.npm.exitCode !== null || run.npm.signalCode !== null, "npm exits", 10_000);
  try {
    await waitUntil(() => run.closed(), "sbinbox exits after npm", 20_000);
  } catch (error) {
    throw new Error(`${(error as Error).message}; its stderr: ${run.stderr().slice(-1500)}`);
  }
  const left = procStat(run.pid);
  assert.ok(left === undefined || left.state === "Z", `it is gone (${JSON.stringify(left)})`);
}

describe("`npx sbinbox` stopped through npm (which passes a SIGTERM to its shell only, and the shell dies of it)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker();
  let db: Database & { url: string };
  before(async () => {
    db = await exampleDatabase("worker_npx");
  });
  after(async () => {
    // Without the watch these are the orphans the test found: none may outlive the test.
    for (const pid of started)
      if (procStat(pid) && procStat(pid)?.state !== "Z") process.kill(pid, "SIGKILL");
    await db?.close();
  });

  it("a SIGTERM to npm alone stops `npx sbinbox worker` too: gracefully, its work applied", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: "sbinbox" });
    await publisher.publishBatch([0, 1, 2].map((i) => demoEvent("npx", i)));
    await publisher.close();
    const run = await npxSbinbox(
      "worker",
      { SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString, SBINBOX_POSTGRES_URL: db.url },
      "worker ready",
    );
    for (let i = 0; i < 100 && (await countCredits(db)) < 3; i++)
      await new Promise((r) => setTimeout(r, 100));
    assert.equal(await countCredits(db), 3, "the worker is working before the signal");

    await terminateNpm(run);
    assert.match(run.stderr(), /the npm process that started this worker is gone/);
    assert.equal(logLine(run.stderr(), "stopping gracefully").signal, "npm exited");
    assert.match(run.stderr(), /"msg":"stopped"/);
  });

  // A Ctrl-C goes to the whole foreground group; so does a supervisor that stops a control group (systemd's default).
  for (const signal of ["SIGINT", "SIGTERM"] as const)
    it(`${signal} to npm's whole group stops \`npx sbinbox worker\` gracefully: npm's exit meanwhile is no second signal`, async function () {
      // A handler that takes 3 s, so the graceful stop is still waiting for it when npm has exited.
      const dir = await mkdtemp(join(tmpdir(), "sbinbox-npx-"));
      const handlers = join(dir, "slow.mjs");
      await writeFile(
        handlers,
        `import { z } from ${JSON.stringify(import.meta.resolve("zod"))};
export default {
  name: "slow",
  handlers: () => [{
    kind: "transactional",
    type: "Slow",
    schema: z.object({}),
    async handle() {
      process.stderr.write("slow handler started\\n");
      await new Promise((resolve) => setTimeout(resolve, 3000));
    },
  }],
};
`,
      );
      const run = await npxSbinbox(
        "worker",
        {
          SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
          SBINBOX_POSTGRES_URL: db.url,
          SBINBOX_HANDLERS: handlers,
        },
        "worker ready",
        { group: true },
      );
      await sendRawMessages(fixture.client, "sbinbox", [
        { messageId: `slow-${signal}`, subject: "Slow", body: Buffer.from("{}") },
      ]);
      await waitUntil(() => run.stderr().includes("slow handler started"), "the handler is running", 20_000);
      process.kill(-run.npm.pid!, signal);
      await waitUntil(() => run.closed(), "the worker exits", 20_000);
      await rm(dir, { recursive: true, force: true });
      assert.equal(logLine(run.stderr(), "stopping gracefully").signal, signal);
      assert.doesNotMatch(run.stderr(), /second signal|the npm process that started this worker is gone/);
      assert.equal(logLine(run.stderr(), "stopped").committed, 1, "the handler in flight was waited for");
    });

  it("a SIGTERM to npm alone stops `npx sbinbox relay` too", async function () {
    const run = await npxSbinbox(
      "relay",
      { SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString, SBINBOX_POSTGRES_URL: db.url },
      "relay ready",
    );
    await terminateNpm(run);
    assert.match(run.stderr(), /the npm process that started this relay is gone/);
    assert.equal(logLine(run.stderr(), "stopping").signal, "npm exited");
    assert.match(run.stderr(), /"msg":"stopped"/);
  });
});
