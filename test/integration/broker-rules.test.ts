import assert from "node:assert/strict";
import { isServiceBusError, type ServiceBusReceivedMessage, type RuleProperties } from "@azure/service-bus";
import { parseConfig } from "../../src/localbroker/config.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";

const config = parseConfig({
  UserConfig: {
    Namespaces: [
      {
        Name: "test",
        Queues: [{ Name: "plain" }],
        Topics: [
          {
            Name: "orders",
            Subscriptions: [
              { Name: "all" },
              {
                Name: "eu",
                Rules: [
                  {
                    Name: "eu-only",
                    Properties: { FilterType: "Sql", SqlFilter: { SqlExpression: "region = 'eu'" } },
                  },
                ],
              },
            ],
          },
        ],
      },
    ],
  },
});

async function rulesOf(fixture: ReturnType<typeof useLocalBroker>, sub: string): Promise<RuleProperties[]> {
  const manager = fixture.client.createRuleManager("orders", sub);
  const rules: RuleProperties[] = [];
  for await (const rule of manager.listRules()) rules.push(rule);
  return rules;
}

async function expectCode(promise: Promise<unknown>, code: string, text?: RegExp): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(isServiceBusError(error), `expected a ServiceBusError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    if (text) assert.match(error.message, text);
    return true;
  });
}

/**
 * Rule management over AMQP (com.microsoft:enumerate-rules, add-rule, remove-rule; learn.microsoft.com, "AMQP 1.0
 * in Azure Service Bus: request-response-based operations"), through the JavaScript SDK's rule manager.
 */
describe("local broker: rule management over AMQP (createRuleManager)", () => {
  const fixture = useLocalBroker(config);

  it("lists a subscription's rules: $Default's true filter, a config file's SQL rule", async () => {
    const all = await rulesOf(fixture, "all");
    assert.deepEqual(
      all.map((r) => [r.name, r.filter]),
      [["$Default", { sqlExpression: "1=1" }]],
    );
    const eu = await rulesOf(fixture, "eu");
    assert.deepEqual(
      eu.map((r) => [r.name, r.filter]),
      [["eu-only", { sqlExpression: "region = 'eu'" }]],
    );
  });

  it("adds and removes rules that then decide what reaches the subscription", async () => {
    const manager = fixture.client.createRuleManager("orders", "all");
    await manager.createRule("big", { subject: "big", applicationProperties: { tier: "gold" } });
    await manager.createRule("uk", { sqlExpression: "region = 'uk' AND amount > 10" });
    await manager.deleteRule("$Default");
    const rules = await rulesOf(fixture, "all");
    assert.deepEqual(
      rules.map((r) => r.name),
      ["big", "uk"],
    );
    const big = rules.find((r) => r.name === "big")!.filter as {
      subject?: string;
      applicationProperties?: unknown;
    };
    assert.equal(big.subject, "big");
    assert.deepEqual(big.applicationProperties, { tier: "gold" });

    const sender = fixture.client.createSender("orders");
    await sender.sendMessages([
      { messageId: "m1", body: 1, subject: "big", applicationProperties: { tier: "gold" } },
      { messageId: "m2", body: 2, subject: "big", applicationProperties: { tier: "silver" } },
      { messageId: "m3", body: 3, applicationProperties: { region: "uk", amount: 20 } },
      { messageId: "m4", body: 4, applicationProperties: { region: "uk", amount: 5 } },
      { messageId: "m5", body: 5, applicationProperties: { region: "eu", amount: 5 } },
    ]);
    await sender.close();
    await waitUntil(() => fixture.broker.counts("orders/Subscriptions/eu").active === 1, "eu has its one");
    const receiver = fixture.client.createReceiver("orders", "all", { receiveMode: "receiveAndDelete" });
    const got: ServiceBusReceivedMessage[] = await receiver.receiveMessages(10, { maxWaitTimeInMs: 500 });
    await receiver.close();
    assert.deepEqual(got.map((m) => m.messageId).sort(), ["m1", "m3"]);

    // back as it was: the true filter again, the others removed
    await manager.createRule("$Default", { sqlExpression: "1=1" });
    await manager.deleteRule("big");
    await manager.deleteRule("uk");
    assert.deepEqual(
      (await rulesOf(fixture, "all")).map((r) => r.name),
      ["$Default"],
    );
  });

  it("refuses what Service Bus refuses, and what the local broker does not evaluate, naming it", async () => {
    const manager = fixture.client.createRuleManager("orders", "eu");
    await expectCode(
      manager.createRule("eu-only", { sqlExpression: "1=1" }),
      "MessagingEntityAlreadyExists",
      /already exists/,
    );
    await expectCode(manager.deleteRule("nope"), "MessagingEntityNotFound", /could not be found/);
    await assert.rejects(manager.createRule("bad", { sqlExpression: "region = " }), /rule "bad"/);
    await assert.rejects(
      manager.createRule("act", { sqlExpression: "1=1" }, { sqlExpression: "SET x = 1" }),
      /rule actions \(sql-rule-action\) are not supported by the local broker/,
    );
    assert.deepEqual(
      (await rulesOf(fixture, "eu")).map((r) => r.name),
      ["eu-only"],
      "nothing refused was added",
    );
  });
});
