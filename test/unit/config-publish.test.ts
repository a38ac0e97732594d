import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../../src/config/load.ts";
import { loadPublishConfig } from "../../src/config/publish.ts";
import { ConfigError } from "../../src/domain/errors.ts";

const OUTPUT_HINT = ", or the deployment's output SERVICEBUS_NAMESPACE";
const CS = "Endpoint=sb://localhost:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true";

/** What a reader gives for `env`: its values, or the error's class, setting and message. */
async function outcome(read: () => unknown): Promise<unknown> {
  try {
    const c = (await read()) as { serviceBus: unknown; queue: string };
    return { serviceBus: c.serviceBus, queue: c.queue };
  } catch (error) {
    assert.ok(error instanceof ConfigError, `not a ConfigError: ${String(error)}`);
    return { error: error.setting, message: error.message };
  }
}

describe("sbinbox publish's settings, read without zod", function () {
  const cases: Record<string, NodeJS.ProcessEnv> = {
    "a connection string": { SBINBOX_SERVICEBUS_CONNECTION_STRING: `  ${CS} ` },
    "a namespace and a queue": {
      SBINBOX_SERVICEBUS_NAMESPACE: "sb-x.servicebus.windows.net",
      SBINBOX_QUEUE: " orders ",
    },
    "nothing set": {},
    "only blanks": { SBINBOX_SERVICEBUS_CONNECTION_STRING: "  ", SBINBOX_QUEUE: "" },
    "both set": { SBINBOX_SERVICEBUS_CONNECTION_STRING: CS, SBINBOX_SERVICEBUS_NAMESPACE: "a.b" },
    "a connection string without Endpoint": { SBINBOX_SERVICEBUS_CONNECTION_STRING: "Server=x" },
    "a connection string without a key name": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: "Endpoint=sb://localhost:25672",
    },
    "a connection string with a key name and no key": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING:
        "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=",
    },
    "a connection string with a shared access signature": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING:
        "Endpoint=sb://x.servicebus.windows.net/;SharedAccessSignature=SharedAccessSignature sr=x&sig=y&se=1&skn=k",
    },
    "a namespace that is no host name": { SBINBOX_SERVICEBUS_NAMESPACE: "sb-x" },
    "a bad namespace beside a connection string": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: CS,
      SBINBOX_SERVICEBUS_NAMESPACE: "not a host",
    },
    "a queue name of 261 characters": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: CS,
      SBINBOX_QUEUE: "q".repeat(261),
    },
    "a topic": { SBINBOX_SERVICEBUS_CONNECTION_STRING: CS, SBINBOX_TOPIC: " accounts " },
    "a topic with a subscription": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: CS,
      SBINBOX_TOPIC: "accounts",
      SBINBOX_SUBSCRIPTION: "billing",
    },
    "a queue and a topic": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: CS,
      SBINBOX_QUEUE: "q",
      SBINBOX_TOPIC: "t",
    },
    "a queue and a subscription": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: CS,
      SBINBOX_QUEUE: "q",
      SBINBOX_SUBSCRIPTION: "s",
    },
    "a subscription alone": { SBINBOX_SERVICEBUS_CONNECTION_STRING: CS, SBINBOX_SUBSCRIPTION: "s" },
    "a topic name with a space": { SBINBOX_SERVICEBUS_CONNECTION_STRING: CS, SBINBOX_TOPIC: "a b" },
    "a subscription name of 51 characters": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: CS,
      SBINBOX_TOPIC: "t",
      SBINBOX_SUBSCRIPTION: "s".repeat(51),
    },
    "a queue name of 260 characters": {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: CS,
      SBINBOX_QUEUE: "q".repeat(260),
    },
  };
  for (const [name, env] of Object.entries(cases)) {
    it(`gives what the full loader gives: ${name}`, async function () {
      const full = await outcome(() => loadConfig({ env, purpose: "publish" }));
      const lean = await outcome(() => loadPublishConfig(env));
      // The one difference by design: only the lean reader takes the deployment's outputs, so only it names one.
      const message = (lean as { message?: string }).message?.replace(OUTPUT_HINT, "");
      assert.deepEqual(message === undefined ? lean : { ...(lean as object), message }, full);
    });
  }

  it("with nothing set, names the deployment's output SERVICEBUS_NAMESPACE too (the shell after azd or step 2)", async function () {
    await assert.rejects(
      loadPublishConfig({}),
      (e: ConfigError) =>
        e.setting === "SBINBOX_SERVICEBUS_CONNECTION_STRING" &&
        e.message.includes(OUTPUT_HINT) &&
        /SBINBOX_SERVICEBUS_NAMESPACE/.test(e.message),
    );
  });

  it("names the setting and the value it refused", async function () {
    await assert.rejects(
      loadPublishConfig({ SBINBOX_SERVICEBUS_NAMESPACE: "sb-x" }),
      (e: ConfigError) =>
        e.setting === "SBINBOX_SERVICEBUS_NAMESPACE" &&
        /fully qualified host name \(got "sb-x"\)/.test(e.message),
    );
  });

  it("takes the Bicep outputs SERVICEBUS_NAMESPACE and SERVICEBUS_QUEUE when the SBINBOX_ settings are unset", async function () {
    const outputs = { SERVICEBUS_NAMESPACE: "sb-x.servicebus.windows.net", SERVICEBUS_QUEUE: "notes" };
    assert.deepEqual(await loadPublishConfig(outputs), {
      serviceBus: { kind: "namespace", fullyQualifiedNamespace: "sb-x.servicebus.windows.net" },
      queue: "notes",
    });
    // An SBINBOX_ setting wins over the output of the same thing, and a connection string over the namespace.
    assert.deepEqual(await loadPublishConfig({ ...outputs, SBINBOX_QUEUE: "orders" }), {
      serviceBus: { kind: "namespace", fullyQualifiedNamespace: "sb-x.servicebus.windows.net" },
      queue: "orders",
    });
    assert.deepEqual(await loadPublishConfig({ ...outputs, SBINBOX_SERVICEBUS_CONNECTION_STRING: CS }), {
      serviceBus: { kind: "connection-string", connectionString: CS },
      queue: "notes",
    });
    // A topic is the entity; the deployment's queue is not used beside it.
    assert.equal((await loadPublishConfig({ ...outputs, SBINBOX_TOPIC: "events" })).queue, "events");
    await assert.rejects(
      loadPublishConfig({ SERVICEBUS_NAMESPACE: "sb-x" }),
      (e: ConfigError) => e.setting === "SERVICEBUS_NAMESPACE" && /\(got "sb-x"\)/.test(e.message),
    );
  });

  it("with SBINBOX_CONFIG_FILE, the whole file is checked by the full loader", async function () {
    const dir = await mkdtemp(join(tmpdir(), "sbinbox-publish-config-"));
    try {
      const file = join(dir, "config.json");
      await writeFile(
        file,
        JSON.stringify({ SBINBOX_SERVICEBUS_CONNECTION_STRING: CS, SBINBOX_QUEUE: "orders" }),
      );
      assert.deepEqual(await loadPublishConfig({ SBINBOX_CONFIG_FILE: file }), {
        serviceBus: { kind: "connection-string", connectionString: CS },
        queue: "orders",
      });
      // A typo in a key is an unknown setting, not a silently defaulted queue.
      await writeFile(
        file,
        JSON.stringify({ SBINBOX_SERVICEBUS_CONNECTION_STRING: CS, SBINBOX_QUEU: "orders" }),
      );
      await assert.rejects(
        loadPublishConfig({ SBINBOX_CONFIG_FILE: file }),
        (e: ConfigError) => e.setting === "SBINBOX_QUEU" && /unknown setting/.test(e.message),
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
