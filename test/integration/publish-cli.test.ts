import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { toServiceBusMessage, type PublishEvent } from "../../src/servicebus/publisher.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { spawn } from "node:child_process";
import { createServer, type AddressInfo } from "node:net";
import { BIN, cleanEnv, runCli, startCli } from "../helpers/cli.ts";
import { imageRecorder } from "../helpers/images.ts";

const QUEUE = "sbinbox";

/** `sbinbox publish` as a user runs it: a child process against the local broker. */
describe("sbinbox publish (streaming, in flight)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker();
  let dir: string;
  const env = () => ({ SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString });
  const line = (key: string, extra = "") =>
    JSON.stringify({ type: "AccountCredited", key, body: { accountId: "a", amount: 1, note: extra } });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-publish-cli-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function drain(n: number): Promise<string[]> {
    const receiver = fixture.client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
    const ids: string[] = [];
    try {
      const deadline = Date.now() + 15_000;
      while (ids.length < n && Date.now() < deadline) {
        const got = await receiver.receiveMessages(Math.min(500, n - ids.length), { maxWaitTimeInMs: 500 });
        ids.push(...got.map((m) => String(m.messageId)));
      }
    } finally {
      await receiver.close();
    }
    return ids;
  }

  it("streams a file of many batches in its order; a rerun is dropped by the broker", async function () {
    const file = join(dir, "many.jsonl");
    const keys = Array.from({ length: 1_500 }, (_, i) => `cli-${i}`);
    // CRLF line ends and blank lines are accepted; ~1 KB events make about a dozen batches.
    await writeFile(file, keys.map((k) => line(k, "y".repeat(1_000))).join("\r\n\r\n") + "\r\n");
    const first = await runCli(["publish", "--file", file, "--in-flight", "2"], env());
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /published 1500 events to sbinbox in [\d.]+ s \(\d+\/s\)/);
    assert.match(first.stderr, /publish: done 1500\/1500/);
    const counts = fixture.broker.counts(QUEUE);
    const again = await runCli(["publish", "--file", file], env());
    assert.equal(again.code, 0, again.stderr);
    assert.equal(fixture.broker.counts(QUEUE).duplicatesDropped, counts.duplicatesDropped + 1_500);
    assert.deepEqual(
      await drain(1_500),
      keys.map((k) => deriveMessageId("AccountCredited", k)),
    );
  });

  it("checks the whole file first: a bad last line sends nothing, and names its line", async function () {
    const before = fixture.broker.counts(QUEUE).active;
    const cases: [string, RegExp][] = [
      [`{"type":"AccountCredited","key":"k"}`, /:501: needs a "body"/],
      [
        `{"type":"Account:Credited","key":"k","body":1}`,
        /:501: event type "Account:Credited" must not contain ":"/,
      ],
      [`{"type":"AccountCredited","key":"k","body":`, /:501: not JSON/],
      // A JSON escape that parses to a lone surrogate: no UTF-8, so no MessageId.
      [`{"type":"AccountCredited","key":"k\\ud800","body":1}`, /:501: business key has a lone surrogate/],
    ];
    for (const [bad, message] of cases) {
      const file = join(dir, "bad.jsonl");
      await writeFile(file, [...Array.from({ length: 500 }, (_, i) => line(`bad-${i}`)), bad].join("\n"));
      const result = await runCli(["publish", "--file", file], env());
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, message);
    }
    assert.equal(fixture.broker.counts(QUEUE).active, before, "nothing sent from a bad file");
  });

  it("a connection string without a key: a configuration error naming the setting, not the SDK's TypeError", async function () {
    for (const command of [["publish", "--count", "1"], ["dlq", "list"], ["relay"], ["worker"]]) {
      const result = await runCli(command, {
        SBINBOX_SERVICEBUS_CONNECTION_STRING: "Endpoint=sb://localhost:25672",
        SBINBOX_POSTGRES_URL: "postgres://127.0.0.1:1/none",
      });
      assert.equal(result.code, 2, `${command.join(" ")}: ${result.stderr}`);
      assert.match(
        result.stderr,
        /configuration error: SBINBOX_SERVICEBUS_CONNECTION_STRING: has no SharedAccessKeyName=/,
        command.join(" "),
      );
      assert.doesNotMatch(result.stderr, /TypeError|\n\s+at /, command.join(" "));
    }
  });

  it("refuses bad options with the reason, and publishes nothing from an empty file", async function () {
    const empty = join(dir, "empty.jsonl");
    await writeFile(empty, "\n\n");
    const none = await runCli(["publish", "--file", empty], env());
    assert.equal(none.code, 0, none.stderr);
    assert.match(none.stdout, /no events in .*empty\.jsonl: nothing published/);
    for (const [args, message] of [
      [["--count", "5", "--in-flight", "0"], /--in-flight must be a whole number from 1 to 64/],
      [["--count", "5", "--in-flight", "two"], /--in-flight must be a whole number from 1 to 64/],
      [["--count", "5", "--batch", "100"], /Unknown option '--batch'/],
      [["--count", "0"], /--count must be a positive whole number/],
      [["--file", join(dir, "missing.jsonl")], /ENOENT/],
    ] as const) {
      const result = await runCli(["publish", ...args], env());
      assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
      assert.match(result.stderr, message);
    }
  });

  it("a send the broker refuses: exit 1, how many were acknowledged, the error's name and code", async function () {
    const file = join(dir, "refused.jsonl");
    await writeFile(file, line("refused-0") + "\n");
    const result = await runCli(["publish", "--file", file], {
      ...env(),
      SBINBOX_QUEUE: "no-such-queue",
    });
    assert.equal(result.code, 1, result.stderr);
    assert.match(
      result.stderr,
      /failed after 0 events acknowledged: ServiceBusError \[MessagingEntityNotFound\]: .*no-such-queue/,
    );
    assert.match(result.stderr, /A rerun of the same command is safe/);
    assert.match(result.stderr, /only inside its duplicate-detection window \(default 10 minutes\)/);
  });

  it("after a failed --count without --run-id: the run id and the exact rerun command, not 'safe'", async function () {
    const result = await runCli(["publish", "--count", "10", "--in-flight", "2"], {
      ...env(),
      SBINBOX_QUEUE: "no-such-queue",
    });
    assert.equal(result.code, 1, result.stderr);
    const id = /Run id (\w+):/.exec(result.stderr)?.[1];
    assert.ok(id, result.stderr);
    assert.ok(
      result.stderr.includes(`sbinbox publish --count 10 --in-flight 2 --run-id ${id}\n`),
      result.stderr,
    );
    assert.doesNotMatch(result.stderr, /is safe/);
  });

  it("after a failed --type: a rerun of the same command is safe (same type and key), no run id", async function () {
    const result = await runCli(
      ["publish", "--type", "NoteCreated", "--key", "note-1", "--body", '{"noteId": 1, "text": "x"}'],
      { ...env(), SBINBOX_QUEUE: "no-such-queue" },
    );
    assert.equal(result.code, 1, result.stderr);
    assert.match(result.stderr, /failed after 0 events acknowledged/);
    assert.match(
      result.stderr,
      /A rerun of the same command is safe: the same type and key give the same MessageId/,
    );
    assert.doesNotMatch(result.stderr, /Run id|--run-id|undefined/);
  });

  it("refuses a pipe for --file (it is read twice), sending nothing", async function () {
    const before = fixture.broker.counts(QUEUE).active;
    const child = spawn(process.execPath, [BIN, "publish", "--file", "/dev/stdin"], {
      env: cleanEnv(env()),
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.stdout.resume();
    child.stdin
      .on("error", () => {})
      .end(Array.from({ length: 300 }, (_, i) => line(`pipe-${i}`)).join("\n"));
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    assert.equal(code, 2, stderr);
    assert.match(stderr, /\/dev\/stdin is not a regular file/);
    assert.equal(fixture.broker.counts(QUEUE).active, before, "nothing sent");
  });

  it("an event too large for a batch is refused before anything is sent, naming its line", async function () {
    const before = fixture.broker.counts(QUEUE).active;
    const file = join(dir, "large.jsonl");
    const lines = Array.from({ length: 300 }, (_, i) => line(`large-${i}`));
    lines.splice(200, 0, line("large-big", "z".repeat(300 * 1024)));
    await writeFile(file, lines.join("\n"));
    const result = await runCli(["publish", "--file", file], env());
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, /large\.jsonl:201 is larger than a batch may be \(262144 bytes\)/);
    assert.equal(fixture.broker.counts(QUEUE).active, before, "nothing sent");
  });

  it("without an OpenTelemetry SDK, an event that fits only without trace properties is sent, not refused", async function () {
    // The largest event that fits an empty batch as this process sends it (no SDK registered: no traceparent or
    // Diagnostic-Id), found with the SDK's own encoding; with the two trace properties it would not fit.
    const sender = fixture.client.createSender(QUEUE);
    const traceparent = `00-${"0".repeat(32)}-${"0".repeat(16)}-01`;
    const fits = async (size: number, trace: boolean): Promise<boolean> => {
      const message = toServiceBusMessage(JSON.parse(line("edge", "z".repeat(size))) as PublishEvent);
      if (trace) message.applicationProperties = { traceparent, "Diagnostic-Id": traceparent };
      return (await sender.createMessageBatch()).tryAddMessage(message);
    };
    let [low, high] = [250_000, 262_144];
    while (high - low > 1) {
      const mid = Math.floor((low + high) / 2);
      if (await fits(mid, false)) low = mid;
      else high = mid;
    }
    assert.equal(await fits(low, true), false, "with trace properties the edge event would not fit");
    await sender.close();
    const before = fixture.broker.counts(QUEUE).active;
    const file = join(dir, "edge.jsonl");
    await writeFile(file, line("edge", "z".repeat(low)));
    const result = await runCli(["publish", "--file", file], env());
    assert.equal(result.code, 0, result.stderr);
    assert.equal(fixture.broker.counts(QUEUE).active, before + 1, "sent");
    assert.deepEqual(await drain(1), [deriveMessageId("AccountCredited", "edge")]);
  });

  it("loads only what publishing needs: no zod, OpenTelemetry, database driver or worker module", async function () {
    const hook = join(dir, "record-modules.mjs");
    const out = join(dir, "modules.json");
    await writeFile(
      hook,
      `import { registerHooks } from "node:module";
       import { writeFileSync } from "node:fs";
       const seen = new Set();
       registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); seen.add(r.url); return r; } });
       process.on("exit", () => writeFileSync(${JSON.stringify(out)}, JSON.stringify([...seen])));`,
    );
    const result = await runCli(["publish", "--count", "1"], {
      ...env(),
      NODE_OPTIONS: `--import=${pathToFileURL(hook).href}`,
    });
    assert.equal(result.code, 0, result.stderr);
    const loaded = JSON.parse(await readFile(out, "utf8")) as string[];
    assert.ok(
      loaded.some((u) => u.includes("/node_modules/@azure/service-bus/")),
      "the probe must see packages",
    );
    assert.ok(
      loaded.some((u) => u.endsWith("/src/cli/publish.ts")),
      "the probe must see the repo's modules",
    );
    const unwanted = loaded.filter(
      (u) =>
        /\/node_modules\/(zod|@opentelemetry|pg|mssql|tedious|@azure\/identity|@azure\/monitor-opentelemetry-exporter)\//.test(
          u,
        ) ||
        /\/src\/(worker|inbox|localbroker|app|embedded|outbox)\//.test(u) ||
        /\/src\/config\/(load|schema)\.ts$/.test(u),
    );
    assert.deepEqual(unwanted, []);
  });

  describe("--file replaces itself with a 4 MB semi-space", function () {
    const recorder = async () => {
      const { nodeOptions, images } = await imageRecorder(dir);
      return { nodeOptions, processes: images };
    };

    it("replaces itself with the flag, in the same process, and exits with its code", async function () {
      const { nodeOptions, processes } = await recorder();
      const file = join(dir, "small.jsonl");
      await writeFile(file, [line("semi-1"), line("semi-2")].join("\n"));
      const { child, done } = startCli(["publish", "--file", file], { ...env(), NODE_OPTIONS: nodeOptions });
      const result = await done;
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, /published 2 events/);
      // Two images of one process: no parent left waiting beside the publisher.
      const [first, second, ...rest] = await processes();
      assert.deepEqual(rest, []);
      assert.equal(first!.pid, child.pid);
      assert.equal(second!.pid, child.pid);
      assert.ok(!first!.execArgv.some((a) => a.startsWith("--max-semi-space-size")));
      assert.ok(second!.execArgv.includes("--max-semi-space-size=4"), JSON.stringify(second));
      // A bad file: exit code 2 as from any other command.
      await writeFile(file, "not json\n");
      const bad = await runCli(["publish", "--file", file], env());
      assert.equal(bad.code, 2);
      assert.match(bad.stderr, /:1: not JSON/);
    });

    it("--inspect on a fixed port: the publishing image gets the port, not 'address already in use'", async function () {
      const file = join(dir, "inspect.jsonl");
      await writeFile(file, line("inspect-1"));
      const port = await freePort();
      const command = spawn(
        process.execPath,
        [`--inspect=127.0.0.1:${port}`, BIN, "publish", "--file", file],
        {
          env: cleanEnv(env()),
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      let stderr = "";
      command.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
      const code = await new Promise((resolve) => command.on("close", resolve));
      assert.equal(code, 0, stderr);
      assert.doesNotMatch(stderr, /address already in use|failed/);
      assert.equal(
        stderr.match(new RegExp(`Debugger listening on ws://127\\.0\\.0\\.1:${port}/`, "g"))?.length,
        2,
        stderr,
      );
    });

    it("leaves a semi-space given in NODE_OPTIONS alone, and --count runs in one process", async function () {
      const { nodeOptions, processes } = await recorder();
      const file = join(dir, "given.jsonl");
      await writeFile(file, line("semi-3"));
      const given = await runCli(["publish", "--file", file], {
        ...env(),
        NODE_OPTIONS: `${nodeOptions} --max-semi-space-size=8`,
      });
      assert.equal(given.code, 0, given.stderr);
      const count = await runCli(["publish", "--count", "1"], { ...env(), NODE_OPTIONS: nodeOptions });
      assert.equal(count.code, 0, count.stderr);
      assert.equal((await processes()).length, 2, "one process for each command");
    });

    it("SIGTERM to the command ends it: one process, which dies of the signal", async function () {
      const { nodeOptions, processes } = await recorder();
      const file = join(dir, "long.jsonl");
      await writeFile(file, Array.from({ length: 40_000 }, (_, i) => line(`term-${i}`)).join("\n"));
      const before = fixture.broker.counts(QUEUE).active;
      const { child, done } = startCli(["publish", "--file", file], { ...env(), NODE_OPTIONS: nodeOptions });
      await waitUntil(() => fixture.broker.counts(QUEUE).active > before, "the first batch arrived", 30_000);
      child.kill("SIGTERM");
      const result = await done;
      assert.equal(result.signal, "SIGTERM", `exited with ${result.code}: ${result.stderr}`);
      assert.deepEqual(
        (await processes()).map((p) => p.pid),
        [child.pid, child.pid],
      );
      assert.ok(fixture.broker.counts(QUEUE).active - before < 40_000, "it stopped before the end");
      await drain(fixture.broker.counts(QUEUE).active);
    });
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
