import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ServiceBusClient } from "@azure/service-bus";
import {
  BrokerConfigError,
  defaultConfig,
  loadConfigFile,
  parseConfig,
} from "../../src/localbroker/config.ts";
import { parseIsoDuration } from "../../src/localbroker/duration.ts";

/** The sample Config.json the Service Bus emulator ships with (one queue, one topic). */
const emulatorSample = {
  UserConfig: {
    Namespaces: [
      {
        Name: "sbemulatorns",
        Queues: [
          {
            Name: "queue.1",
            Properties: {
              DeadLetteringOnMessageExpiration: false,
              DefaultMessageTimeToLive: "PT1H",
              DuplicateDetectionHistoryTimeWindow: "PT20S",
              ForwardDeadLetteredMessagesTo: "",
              ForwardTo: "",
              LockDuration: "PT1M",
              MaxDeliveryCount: 3,
              RequiresDuplicateDetection: false,
              RequiresSession: false,
            },
          },
        ],
        Topics: [
          {
            Name: "topic.1",
            Properties: {
              DefaultMessageTimeToLive: "PT1H",
              DuplicateDetectionHistoryTimeWindow: "PT20S",
              RequiresDuplicateDetection: false,
            },
            Subscriptions: [
              {
                Name: "subscription.1",
                Properties: { LockDuration: "PT1M", MaxDeliveryCount: 3 },
                Rules: [],
              },
            ],
          },
        ],
      },
    ],
    Logging: { Type: "File" },
  },
};

function withQueueProperties(properties: Record<string, unknown>): unknown {
  return { UserConfig: { Namespaces: [{ Name: "ns", Queues: [{ Name: "q", Properties: properties }] }] } };
}

function rejectsNaming(json: unknown, field: string): void {
  assert.throws(
    () => parseConfig(json),
    (error: unknown) => {
      assert.ok(error instanceof BrokerConfigError);
      assert.equal(error.field, field);
      assert.ok(error.message.includes(field));
      return true;
    },
  );
}

describe("local broker: configuration in the emulator's Config.json shape", () => {
  it("reads the emulator's sample config: its queue with its settings, its topic with its subscription", () => {
    const config = parseConfig(emulatorSample);
    assert.equal(config.namespace, "sbemulatorns");
    assert.deepEqual(config.queues, [
      {
        name: "queue.1",
        lockDurationMs: 60_000,
        maxDeliveryCount: 3,
        requiresDuplicateDetection: false,
        duplicateDetectionWindowMs: 20_000,
        defaultTimeToLiveMs: 3_600_000,
        deadLetteringOnMessageExpiration: false,
        maxMessageSizeBytes: 256 * 1024,
        maxSizeBytes: 1024 * 1024 * 1024,
        requiresSession: false,
      },
    ]);
    assert.deepEqual(config.warnings, []);
    const [topic] = config.topics;
    assert.equal(topic?.name, "topic.1");
    assert.equal(topic.requiresDuplicateDetection, false);
    assert.equal(topic.duplicateDetectionWindowMs, 20_000);
    const [subscription] = topic.subscriptions;
    assert.equal(subscription?.queue.name, "topic.1/Subscriptions/subscription.1");
    assert.equal(subscription.queue.lockDurationMs, 60_000);
    assert.equal(subscription.queue.maxDeliveryCount, 3);
    assert.deepEqual(
      subscription.rules.map((r) => r.name),
      ["$Default"],
    );
  });

  it("reads the example config shipped in config/", async () => {
    const config = await loadConfigFile("config/emulator.Config.json");
    assert.deepEqual(
      config.queues.map((q) => q.name),
      ["sbinbox", "queue.1", "billing", "ledger"],
    );
    assert.equal(config.queues[0]?.requiresDuplicateDetection, true);
    // The topology sbinbox deploys on a topic: each service's subscription forwards to its own queue, with the
    // default true filter and no sbinbox rule.
    const [topic] = config.topics;
    assert.deepEqual(
      topic?.subscriptions.map((sub) => [
        sub.queue.name,
        sub.queue.forwardTo,
        sub.queue.forwardDeadLetteredMessagesTo,
        sub.rules.map((r) => r.name),
      ]),
      [
        ["sbinbox-events/Subscriptions/billing", "billing", "billing", ["$Default"]],
        ["sbinbox-events/Subscriptions/ledger", "ledger", "ledger", ["$Default"]],
      ],
    );
    assert.deepEqual(config.warnings, [], "its rule names are ones Azure accepts ($Default is not)");
  });

  it("offers one queue named sbinbox by default, with duplicate detection on", () => {
    const [queue, ...others] = defaultConfig().queues;
    assert.equal(others.length, 0);
    assert.equal(queue?.name, "sbinbox");
    assert.equal(queue?.requiresDuplicateDetection, true);
    assert.equal(queue?.maxDeliveryCount, 10);
    assert.equal(queue?.maxMessageSizeBytes, 262_144);
  });

  it("parses ISO 8601 durations and refuses what is not one", () => {
    assert.equal(parseIsoDuration("PT1M"), 60_000);
    assert.equal(parseIsoDuration("PT0.5S"), 500);
    assert.equal(parseIsoDuration("P1DT2H"), 93_600_000);
    assert.equal(parseIsoDuration("1 minute"), undefined);
    assert.equal(parseIsoDuration("PT"), undefined);
  });

  it("names the bad field in every error", () => {
    const p = "UserConfig.Namespaces[0].Queues[0].Properties";
    rejectsNaming({}, "UserConfig");
    rejectsNaming({ UserConfig: { Namespaces: [] } }, "UserConfig.Namespaces");
    rejectsNaming({ UserConfig: { Namespaces: [{ Queues: [] }] } }, "UserConfig.Namespaces[0].Name");
    rejectsNaming(
      { UserConfig: { Namespaces: [{ Name: "n", Queues: [{}] }] } },
      "UserConfig.Namespaces[0].Queues[0].Name",
    );
    rejectsNaming(withQueueProperties({ LockDuration: "1 minute" }), `${p}.LockDuration`);
    rejectsNaming(withQueueProperties({ MaxDeliveryCount: 0 }), `${p}.MaxDeliveryCount`);
    rejectsNaming(
      withQueueProperties({ RequiresDuplicateDetection: "yes" }),
      `${p}.RequiresDuplicateDetection`,
    );
    rejectsNaming(
      withQueueProperties({ DuplicateDetectionHistoryTimeWindow: 20 }),
      `${p}.DuplicateDetectionHistoryTimeWindow`,
    );
    rejectsNaming(withQueueProperties({ DefaultMessageTimeToLive: "P" }), `${p}.DefaultMessageTimeToLive`);
    rejectsNaming(
      withQueueProperties({ DeadLetteringOnMessageExpiration: 1 }),
      `${p}.DeadLetteringOnMessageExpiration`,
    );
    rejectsNaming(withQueueProperties({ RequiresSession: "yes" }), `${p}.RequiresSession`);
    rejectsNaming(withQueueProperties({ MaxSizeInMegabytes: 0 }), `${p}.MaxSizeInMegabytes`);
    rejectsNaming(withQueueProperties({ MaxSizeInMegabytes: "1024" }), `${p}.MaxSizeInMegabytes`);
    rejectsNaming(withQueueProperties({ MaxSizeInMegabytes: 81_921 }), `${p}.MaxSizeInMegabytes`);
    rejectsNaming(withQueueProperties({ ForwardTo: 5 }), `${p}.ForwardTo`);
    rejectsNaming(
      withQueueProperties({ ForwardDeadLetteredMessagesTo: ["elsewhere"] }),
      `${p}.ForwardDeadLetteredMessagesTo`,
    );
  });

  it("`sbinbox broker --config` serves the emulator's sample config to the SDK and stops on SIGINT", async function () {
    this.timeout(30_000);
    const dir = await mkdtemp(join(tmpdir(), "sbinbox-broker-"));
    const file = join(dir, "Config.json");
    await writeFile(file, JSON.stringify(emulatorSample));
    const child = spawn(process.execPath, ["bin/sbinbox.js", "broker", "--port", "0", "--config", file], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    const exited = once(child, "exit");
    try {
      const deadline = Date.now() + 20_000;
      while (!/Endpoint=sb:\/\/localhost:\d+;\S+/.test(stdout)) {
        if (Date.now() > deadline || child.exitCode !== null)
          throw new Error(`broker did not start: ${stdout}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const connectionString = /Endpoint=sb:\/\/localhost:\d+;\S+/.exec(stdout)![0];
      assert.match(connectionString, /UseDevelopmentEmulator=true$/);
      const client = new ServiceBusClient(connectionString);
      const sender = client.createSender("queue.1");
      await sender.sendMessages({ body: "hello", messageId: "cli-1" });
      const receiver = client.createReceiver("queue.1");
      const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
      assert.equal(message?.body, "hello");
      await receiver.completeMessage(message);
      await client.close();
    } finally {
      child.kill("SIGINT");
    }
    const [code] = (await exited) as [number | null];
    assert.equal(code, 0);
    assert.match(stdout, /broker stopped/);
  });
});
