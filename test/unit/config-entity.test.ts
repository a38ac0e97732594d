import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { parseEntity, refuseSubscription } from "../../src/domain/entity.ts";
import { ConfigError } from "../../src/domain/errors.ts";
import { destinationAttributes } from "../../src/telemetry/names.ts";

function refusal(env: NodeJS.ProcessEnv, purpose?: "publish" | "dlq" | "relay"): ConfigError {
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

describe("config: a queue to receive from, a queue or a topic to send to", function () {
  it("a worker on a topic receives from its service's own queue, named by SBINBOX_QUEUE", function () {
    const config = loadConfig({ env: { SBINBOX_QUEUE: "billing", SBINBOX_CONSUMER: "billing" } });
    assert.equal(config.queue, "billing");
    assert.equal(config.consumer, "billing");
  });

  it("publish and the relay send to the topic", function () {
    const env = {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v",
      SBINBOX_TOPIC: "accounts",
    };
    assert.equal(loadConfig({ env, purpose: "publish" }).queue, "accounts");
  });

  it("refuses a queue with a topic, the removed SBINBOX_SUBSCRIPTION for every command, and a receiver on a topic", function () {
    const cases: [NodeJS.ProcessEnv, string, RegExp, ("publish" | "dlq" | "relay")?][] = [
      [{ SBINBOX_QUEUE: "q", SBINBOX_TOPIC: "t" }, "SBINBOX_TOPIC", /either it or SBINBOX_QUEUE, not both/],
      [
        { SBINBOX_TOPIC: "t", SBINBOX_SUBSCRIPTION: "s" },
        "SBINBOX_SUBSCRIPTION",
        /no longer read.*SBINBOX_QUEUE/,
      ],
      [
        { SBINBOX_QUEUE: "q", SBINBOX_SUBSCRIPTION: "s" },
        "SBINBOX_SUBSCRIPTION",
        /forwards to \(ForwardTo\)/,
      ],
      [{ SBINBOX_TOPIC: "t", SBINBOX_SUBSCRIPTION: "s" }, "SBINBOX_SUBSCRIPTION", /no longer read/, "dlq"],
      [
        { SBINBOX_TOPIC: "t", SBINBOX_SUBSCRIPTION: "s" },
        "SBINBOX_SUBSCRIPTION",
        /no longer read/,
        "publish",
      ],
      [
        { SBINBOX_TOPIC: "t" },
        "SBINBOX_TOPIC",
        /the worker and sbinbox dlq receive from the service's own queue/,
      ],
      [{ SBINBOX_TOPIC: "t" }, "SBINBOX_TOPIC", /own queue \(SBINBOX_QUEUE\)/, "dlq"],
    ];
    for (const [env, setting, message, purpose] of cases) {
      const error = refusal({ SBINBOX_POSTGRES_URL: "postgres://x/y", ...env }, purpose);
      assert.equal(error.setting, setting, JSON.stringify(env));
      assert.match(error.message, message);
    }
  });

  it("the worker and a replay refuse a subscription's path; telemetry still names one apart", function () {
    assert.throws(
      () => refuseSubscription("accounts/Subscriptions/billing", "the worker"),
      /the worker receives from a queue, not from the subscription "accounts\/Subscriptions\/billing": forward the subscription/,
    );
    refuseSubscription("billing", "the worker");
    assert.deepEqual(parseEntity("sbinbox"), { kind: "queue", path: "sbinbox", queue: "sbinbox" });
    assert.deepEqual(destinationAttributes("accounts/Subscriptions/billing"), {
      "messaging.destination.name": "accounts",
      "messaging.destination.subscription.name": "billing",
    });
    assert.deepEqual(destinationAttributes("sbinbox"), { "messaging.destination.name": "sbinbox" });
  });
});
