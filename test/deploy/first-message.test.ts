/**
 * docs/deploy.md's step 5, the first message, run as written: the fenced block after the marker
 * `<!-- first message: test/deploy/first-message.test.ts -->` is read from the doc and given to bash line for line,
 * so the doc and this test cannot drift. Only what needs Azure is swapped: `az` is a stand-in that records what it is
 * asked (and answers `az ad signed-in-user show`), and the namespace is the local broker, given by connection string
 * (which the CLI prefers to the deployment's SERVICEBUS_NAMESPACE output). The deployment's other outputs are set as
 * step 2 exports them, or (the second run) as a stand-in `azd env get-values` prints them, for the doc's azd line to
 * export. The message is then taken from the queue and checked against the documented line: its type, its body, and
 * the MessageId derived from its type and key. No handler runs, so the test holds whatever module a team keeps in
 * handlers/ (the doc's type is the notes example's; a team publishes its own).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { cleanEnv } from "../helpers/cli.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const MARKER = "<!-- first message: test/deploy/first-message.test.ts -->";
const AZD_MARKER = "<!-- after azd up: test/deploy/first-message.test.ts -->";
const USER_ID = "0a0b0c0d-0000-4000-8000-000000000001";
const QUEUE_ID =
  "/subscriptions/x/resourceGroups/rg-sbinbox-dev/providers/Microsoft.ServiceBus/namespaces/sb-sbinbox-x/queues/notes";

/** The shell lines of the fenced block right after the marker. */
function documentedLines(markdown: string, marker: string): string[] {
  const at = markdown.indexOf(marker);
  if (at < 0) throw new Error(`docs/deploy.md has no ${marker}`);
  const block = /```sh\n([\s\S]*?)```/.exec(markdown.slice(at));
  if (!block?.[1]) throw new Error("no ```sh block after the marker");
  return block[1].split("\n").filter((l) => l.trim() !== "" && !l.trim().startsWith("#"));
}

/** The event the block's `sbinbox publish` line names: its --type, --key and --body (single-quoted JSON). */
function documentedEvent(lines: string[]): { type: string; key: string; body: unknown } {
  const line = lines.find((l) => / publish /.test(l));
  const flag = (name: string) => new RegExp(`--${name} (?:'([^']*)'|(\\S+))`).exec(line ?? "");
  const [type, key, body] = ["type", "key", "body"].map((name) => {
    const match = flag(name);
    if (!match) throw new Error(`the publish line has no --${name}: ${line}`);
    return match[1] ?? match[2]!;
  });
  return { type: type!, key: key!, body: JSON.parse(body!) as unknown };
}

// The deployment's outputs as each path leaves them: step 2's `eval "$(jq ...)"` exports them; `azd env get-values`
// prints them as KEY="value" lines without `export` (a stand-in azd prints them so), for the doc's azd line to export.
const OUTPUTS = {
  SERVICEBUS_NAMESPACE: "sb-sbinbox-x.servicebus.windows.net",
  SERVICEBUS_QUEUE: "notes",
  SERVICEBUS_QUEUE_RESOURCE_ID: QUEUE_ID,
};
const paths = [
  { name: "after step 2 (outputs exported)", azd: false },
  { name: "after azd up (azd env get-values, not exported)", azd: true },
];

for (const path of paths)
  describe(`docs/deploy.md, step 5: the first message ${path.name}, run as documented`, function () {
    this.timeout(120_000);
    const fixture = useLocalBroker(
      brokerConfig({
        notes: { LockDuration: "PT1M", MaxDeliveryCount: 10, RequiresDuplicateDetection: true },
      }),
    );
    let dir: string;

    before(async () => {
      dir = await mkdtemp(join(tmpdir(), "sbinbox-first-message-"));
      await writeFile(
        join(dir, "az"),
        `#!/usr/bin/env bash
echo "az $*" >> "$STANDIN_LOG"
if [ "$1 $2 $3" = "ad signed-in-user show" ]; then echo "${USER_ID}"; fi
`,
      );
      await chmod(join(dir, "az"), 0o755);
      await writeFile(
        join(dir, "azd"),
        `#!/usr/bin/env bash
[ "$*" = "env get-values" ] || { echo "stand-in azd: unexpected $*" >&2; exit 1; }
echo 'AZURE_ENV_NAME="dev"'
${Object.entries(OUTPUTS)
  .map(([k, v]) => `echo '${k}="${v}"'`)
  .join("\n")}
`,
      );
      await chmod(join(dir, "azd"), 0o755);
    });

    after(async () => {
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it("grants the user Data Sender on the queue and publishes the documented event to it, once", async function () {
      const markdown = await readFile(join(root, "docs/deploy.md"), "utf8");
      const lines = documentedLines(markdown, MARKER);
      assert.ok(lines.length >= 2, lines.join("\n"));
      if (path.azd) lines.unshift(...documentedLines(markdown, AZD_MARKER));
      const log = join(dir, "log");
      const result = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(
          "bash",
          ["-euo", "pipefail", "-c", lines.join("\n")],
          {
            cwd: root,
            env: cleanEnv({
              PATH: `${dir}:${process.env.PATH ?? ""}`,
              STANDIN_LOG: log,
              ...(path.azd ? {} : OUTPUTS),
              SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
            }),
          },
          (error, stdout, stderr) =>
            resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        );
      });
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, /published 1 events to notes/);

      const calls = (await readFile(log, "utf8")).trim().split("\n");
      assert.deepEqual(calls, [
        "az ad signed-in-user show --query id -o tsv",
        `az role assignment create --role Azure Service Bus Data Sender --assignee-object-id ${USER_ID} --assignee-principal-type User --scope ${QUEUE_ID}`,
      ]);

      const event = documentedEvent(lines);
      const receiver = fixture.client.createReceiver("notes", { receiveMode: "receiveAndDelete" });
      try {
        // The one message, then a short wait that nothing follows it.
        const messages = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
        messages.push(...(await receiver.receiveMessages(10, { maxWaitTimeInMs: 300 })));
        assert.deepEqual(
          messages.map((m) => ({ messageId: m.messageId, subject: m.subject, body: m.body as unknown })),
          [{ messageId: deriveMessageId(event.type, event.key), subject: event.type, body: event.body }],
        );
      } finally {
        await receiver.close();
      }
    });
  });
