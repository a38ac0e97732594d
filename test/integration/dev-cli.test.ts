/**
 * Local development as docs/handlers.md describes it, from a checkout: `npx sbinbox dev` runs the broker and a
 * PostgreSQL kept between runs and prints their settings; `sbinbox migrate`, `sbinbox worker` and `sbinbox publish`
 * started separately with those settings apply a MemoWritten (a fixture module's, so a team's own handlers/ keeps
 * this green); a second `sbinbox dev` on the same folder finds the memo and the migrations still there.
 */
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import { freePort } from "../../src/embedded/free-port.ts";
import { BIN, cleanEnv, runCli, startCli } from "../helpers/cli.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

/** Starts `sbinbox dev`; resolves once it has printed its settings. */
async function startDev(
  args: string[],
): Promise<{ child: ChildProcess; stdout: () => string; exited: Promise<number | null> }> {
  const child = spawn(process.execPath, [BIN, "dev", ...args], {
    env: cleanEnv({}),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on("close", resolve));
  await new Promise<void>((resolve, reject) => {
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      stdout += d;
      if (/export SBINBOX_POSTGRES_URL=.*\n/.test(stdout)) resolve();
    });
    void exited.then((code) => reject(new Error(`sbinbox dev exited ${code}: ${stderr}`)));
  });
  return { child, stdout: () => stdout, exited };
}

/** The settings `sbinbox dev` wrote to <data>/env. */
async function devEnv(data: string): Promise<Record<string, string>> {
  const text = await readFile(join(data, "env"), "utf8");
  return Object.fromEntries(
    text
      .trim()
      .split("\n")
      .map((line) => {
        const [, key, value] = /^(\w+)='(.*)'$/.exec(line)!;
        return [key!, value!];
      }),
  );
}

describe("sbinbox dev: local development with a database that outlives the worker", function () {
  this.timeout(120_000);
  let data: string;
  before(async () => {
    data = await mkdtemp(join(tmpdir(), "sbinbox-dev-"));
    // Run as root, PostgreSQL runs as user postgres, which must enter the folder.
    await chmod(data, 0o755);
  });
  after(async () => {
    if (data) await rm(data, { recursive: true, force: true });
  });

  it("`npx sbinbox` runs the checkout's own command, as the docs write it", async () => {
    const { stdout } = await promisify(execFile)("npx", ["--offline", "sbinbox", "dev", "--help"], {
      cwd: root,
      env: cleanEnv({}),
    });
    assert.match(stdout, /usage: sbinbox dev/);
  });

  it("migrate, worker and publish started separately use it; a second run keeps the data", async () => {
    const brokerPort = await freePort();
    const postgresPort = await freePort();
    const args = ["--data", data, "--port", String(brokerPort), "--postgres-port", String(postgresPort)];
    const first = await startDev(args);
    let worker: ReturnType<typeof startCli> | undefined;
    try {
      assert.match(first.stdout(), new RegExp(`data kept in ${data}/postgres`));
      const env: Record<string, string> = {
        ...(await devEnv(data)),
        SBINBOX_HANDLERS: "./test/fixtures/memo-handlers/index.ts",
      };
      assert.equal(
        env.SBINBOX_POSTGRES_URL,
        `postgres://postgres:postgres@127.0.0.1:${postgresPort}/postgres`,
      );
      const migrated = await runCli(["migrate"], env);
      assert.equal(migrated.code, 0, migrated.stderr);
      assert.match(migrated.stdout, /applied 0001_inbox, .*memos:0001_memos/);
      worker = startCli(["worker"], { ...env, SBINBOX_HTTP_HOST: "127.0.0.1", PORT: "0" });
      const events = join(data, "memos.jsonl");
      await writeFile(
        events,
        `${JSON.stringify({ type: "MemoWritten", key: "7", body: { memoId: 7, text: "kept" } })}\n`,
      );
      const published = await runCli(["publish", "--file", events], env);
      assert.equal(published.code, 0, published.stderr);
      const client = new pg.Client({ connectionString: env.SBINBOX_POSTGRES_URL });
      await client.connect();
      try {
        const deadline = Date.now() + 40_000;
        let rows: { text: string }[] = [];
        while (rows.length === 0 && worker.child.exitCode === null && Date.now() < deadline) {
          rows = (await client.query<{ text: string }>("SELECT text FROM memos WHERE memo_id = 7")).rows;
          if (rows.length === 0) await new Promise((r) => setTimeout(r, 200));
        }
        assert.deepEqual(rows, [{ text: "kept" }]);
      } finally {
        await client.end();
      }
    } finally {
      worker?.child.kill("SIGTERM");
      if (worker) assert.equal((await worker.done).code, 0);
      first.child.kill("SIGTERM");
      assert.equal(await first.exited, 0);
    }
    assert.match(first.stdout(), /stopped; the database is kept/);

    const second = await startDev(args);
    try {
      const env: Record<string, string> = {
        ...(await devEnv(data)),
        SBINBOX_HANDLERS: "./test/fixtures/memo-handlers/index.ts",
      };
      const again = await runCli(["migrate"], env);
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stdout, /sbinbox migrate: up to date/);
      const client = new pg.Client({ connectionString: env.SBINBOX_POSTGRES_URL });
      await client.connect();
      try {
        const { rows } = await client.query<{ text: string }>("SELECT text FROM memos WHERE memo_id = 7");
        assert.deepEqual(rows, [{ text: "kept" }]);
      } finally {
        await client.end();
      }
    } finally {
      second.child.kill("SIGTERM");
      assert.equal(await second.exited, 0);
    }
  });
});
