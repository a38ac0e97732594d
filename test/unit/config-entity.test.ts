import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { copyTargetProperties, parseEntity, subscriptionRule } from "../../src/domain/entity.ts";
import { ConfigError } from "../../src/domain/errors.ts";
import { parseSqlFilter } from "../../src/localbroker/sql-filter.ts";
import { destinationAttributes } from "../../src/telemetry/names.ts";

function refusal(env: NodeJS.ProcessEnv, purpose?: "publish" | "dlq"): ConfigError {
  try {
    loadConfig({
      env: {
        SBINBOX_SERVICEBUS_CONNECTION_STRING:
          "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v",
        ...env,
      },
      purpose,
    });
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  assert.fail("expected a ConfigError");
}

describe("config: a queue, or a topic and its subscription", function () {
  it("a subscription: the worker receives from its path, the consumer defaults to its name", function () {
    const config = loadConfig({ env: { SBINBOX_TOPIC: "accounts", SBINBOX_SUBSCRIPTION: "billing" } });
    assert.equal(config.queue, "accounts/Subscriptions/billing");
    assert.equal(config.consumer, "billing");
    const named = loadConfig({
      env: { SBINBOX_TOPIC: "accounts", SBINBOX_SUBSCRIPTION: "billing", SBINBOX_CONSUMER: "billing-v2" },
    });
    assert.equal(named.consumer, "billing-v2");
  });

  it("a subscription typed in another case is one subscription: one lowercase consumer, property and rule", function () {
    const config = loadConfig({ env: { SBINBOX_TOPIC: "accounts", SBINBOX_SUBSCRIPTION: "Billing" } });
    assert.equal(config.consumer, "billing", "Billing and billing must not be two inbox keys");
    assert.deepEqual(copyTargetProperties(parseEntity(config.queue)), { "sbinbox-subscription": "billing" });
    assert.equal(subscriptionRule("Billing"), subscriptionRule("billing"));
  });

  it("publish and the relay send to the topic; sbinbox dlq reads the subscription", function () {
    const env = {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v",
      SBINBOX_TOPIC: "accounts",
    };
    assert.equal(loadConfig({ env, purpose: "publish" }).queue, "accounts");
    assert.equal(
      loadConfig({ env: { ...env, SBINBOX_SUBSCRIPTION: "billing" }, purpose: "dlq" }).queue,
      "accounts/Subscriptions/billing",
    );
  });

  it("refuses a queue with a topic, a subscription without its topic, and a worker on a bare topic", function () {
    const cases: [NodeJS.ProcessEnv, string, RegExp, ("publish" | "dlq")?][] = [
      [{ SBINBOX_QUEUE: "q", SBINBOX_TOPIC: "t" }, "SBINBOX_TOPIC", /either it or SBINBOX_QUEUE, not both/],
      [{ SBINBOX_QUEUE: "q", SBINBOX_SUBSCRIPTION: "s" }, "SBINBOX_SUBSCRIPTION", /set SBINBOX_TOPIC/],
      [{ SBINBOX_SUBSCRIPTION: "s" }, "SBINBOX_TOPIC", /required with SBINBOX_SUBSCRIPTION/],
      [{ SBINBOX_TOPIC: "t" }, "SBINBOX_SUBSCRIPTION", /required with SBINBOX_TOPIC/],
      [{ SBINBOX_TOPIC: "t" }, "SBINBOX_SUBSCRIPTION", /required with SBINBOX_TOPIC/, "dlq"],
      [{ SBINBOX_TOPIC: "t", SBINBOX_SUBSCRIPTION: "a/b" }, "SBINBOX_SUBSCRIPTION", /subscription name/],
      [{ SBINBOX_TOPIC: "t", SBINBOX_SUBSCRIPTION: "x".repeat(51) }, "SBINBOX_SUBSCRIPTION", /at most 50/],
    ];
    for (const [env, setting, message, purpose] of cases) {
      const error = refusal({ SBINBOX_POSTGRES_URL: "postgres://x/y", ...env }, purpose);
      assert.equal(error.setting, setting, JSON.stringify(env));
      assert.match(error.message, message);
    }
  });

  it("entity paths name the topic and the subscription apart, for the SDK and for telemetry", function () {
    assert.deepEqual(parseEntity("accounts/Subscriptions/billing"), {
      kind: "subscription",
      path: "accounts/Subscriptions/billing",
      topic: "accounts",
      subscription: "billing",
    });
    assert.deepEqual(parseEntity("sbinbox"), { kind: "queue", path: "sbinbox", queue: "sbinbox" });
    assert.deepEqual(destinationAttributes("accounts/Subscriptions/billing"), {
      "messaging.destination.name": "accounts",
      "messaging.destination.subscription.name": "billing",
    });
    assert.deepEqual(destinationAttributes("sbinbox"), { "messaging.destination.name": "sbinbox" });
  });

  it("the subscription rule admits events and the subscription's own copies, nothing addressed elsewhere", function () {
    const filter = parseSqlFilter(subscriptionRule("o'brien"));
    const read = (props: Record<string, string>) => ({
      system: () => undefined,
      user: (n: string) => props[n],
    });
    assert.equal(filter.matches(read({})), true);
    assert.equal(filter.matches(read({ "sbinbox-subscription": "o'brien" })), true);
    assert.equal(filter.matches(read({ "sbinbox-subscription": "ledger" })), false);
  });
});

describe("copy MessageIds on a topic", function () {
  it("differ per subscription, so the topic's shared duplicate detection never drops one service's copy as another's", async function () {
    const { retryMessageId, replayMessageId } = await import("../../src/servicebus/message-id.ts");
    assert.notEqual(retryMessageId("m1", 0, 2, "billing"), retryMessageId("m1", 0, 2, "ledger"));
    assert.notEqual(replayMessageId("m1", 1, "billing"), replayMessageId("m1", 1, "ledger"));
    assert.equal(retryMessageId("m1", 0, 2, "billing"), retryMessageId("m1", 0, 2, "billing"), "stable");
    assert.notEqual(
      retryMessageId("m1", 0, 2, "billing"),
      retryMessageId("m1", 0, 2),
      "and apart from a queue's",
    );
  });
});
