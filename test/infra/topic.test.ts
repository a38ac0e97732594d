import assert from "node:assert/strict";
import { parseSqlFilter } from "../../src/localbroker/sql-filter.ts";
import { subscriptionRule } from "../../src/domain/entity.ts";
import {
  compileTemplate,
  evaluateCopyString,
  obj,
  ofType,
  props,
  single,
  str,
  type JsonObject,
} from "./arm.ts";

const dataReceiverRole = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0";
const dataSenderRole = "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39";

describe("infra: the optional topic, compiled to ARM JSON by the pinned Bicep CLI", function () {
  this.timeout(120_000);
  let main: JsonObject;
  before(async function () {
    main = await compileTemplate("infra/main.bicep");
  });

  it("creates the topic with duplicate detection, one subscription per consumer, only when topicName is given", function () {
    const topic = single(main, "Microsoft.ServiceBus/namespaces/topics");
    assert.equal(props(topic).requiresDuplicateDetection, true);
    assert.match(
      str(topic.raw.condition, "condition"),
      /not\(equals\(parameters\('topicName'\), null\(\)\)\)/,
    );
    const subscription = single(main, "Microsoft.ServiceBus/namespaces/topics/subscriptions");
    assert.equal(props(subscription).maxDeliveryCount, "[parameters('maxDeliveryCount')]");
    assert.match(JSON.stringify(subscription.raw.copy), /subscriptionNames/);
  });

  it("gives each subscription the sbinbox rule, the one the local broker evaluates the same way", function () {
    const rules = ofType(main, "Microsoft.ServiceBus/namespaces/topics/subscriptions/rules");
    assert.equal(rules.length, 2);
    // $Default, the true filter Service Bus creates, is overwritten with a false one: only sbinbox admits.
    const defaultRule = rules.find((r) => /'\$Default'/.test(r.name));
    assert.ok(defaultRule, "no $Default rule");
    assert.deepEqual(props(defaultRule).sqlFilter, { sqlExpression: "1=0" });
    const rule = rules.find((r) => /'sbinbox'/.test(r.name));
    assert.ok(rule, "no sbinbox rule");
    const p = props(rule);
    assert.equal(p.filterType, "SqlFilter");
    const expression = str(obj(p.sqlFilter, "sqlFilter").sqlExpression, "sqlExpression");
    // The ARM expression, evaluated for given subscription names, builds exactly subscriptionRule(name)'s text
    // (lowercased, quotes doubled), the rule the local broker evaluates; and its parser takes it.
    for (const name of ["billing", "Billing", "o'neil.v2", "LEDGER-2"]) {
      assert.equal(evaluateCopyString(expression, name), subscriptionRule(name), name);
      parseSqlFilter(evaluateCopyString(expression, name));
    }
  });

  it("scopes the worker's receiver role to its subscription and its retry sender role to the topic", function () {
    const roles = ofType(main, "Microsoft.Authorization/roleAssignments");
    const bySymbol = (symbol: string) => {
      const found = roles.find((r) => r.symbol === symbol);
      assert.ok(found, symbol);
      return found;
    };
    const receiver = bySymbol("subscriptionReceiverRole");
    assert.match(str(receiver.raw.scope, "scope"), /topics\/subscriptions/);
    assert.match(str(props(receiver).roleDefinitionId, "roleDefinitionId"), /dataReceiverRoleId/);
    assert.equal(obj(receiver.template.variables, "variables").dataReceiverRoleId, dataReceiverRole);
    const retrySender = bySymbol("topicRetrySenderRole");
    assert.match(str(retrySender.raw.scope, "scope"), /namespaces\/topics'/);
    assert.match(str(props(retrySender).roleDefinitionId, "roleDefinitionId"), /dataSenderRoleId/);
    assert.equal(obj(retrySender.template.variables, "variables").dataSenderRoleId, dataSenderRole);
    assert.match(str(bySymbol("receiverRole").raw.condition, "condition"), /not\(variables\('onTopic'\)\)/);
  });

  it("gives the worker SBINBOX_TOPIC and SBINBOX_SUBSCRIPTION instead of SBINBOX_QUEUE when a topic is named", function () {
    const worker = obj(obj(main.resources, "resources").worker, "worker module");
    const params = obj(obj(worker.properties, "module properties").parameters, "module parameters");
    const appSettings = obj(obj(params.appSettings, "appSettings").value, "appSettings value");
    assert.match(
      str(appSettings.SBINBOX_QUEUE, "SBINBOX_QUEUE"),
      /if\(equals\(parameters\('topicName'\), null\(\)\), .*queueName.*, ''\)/,
    );
    assert.match(
      str(appSettings.SBINBOX_TOPIC, "SBINBOX_TOPIC"),
      /coalesce\(parameters\('topicName'\), ''\)/,
    );
    assert.match(
      str(appSettings.SBINBOX_SUBSCRIPTION, "SBINBOX_SUBSCRIPTION"),
      /parameters\('consumerName'\)/,
    );
  });
});
