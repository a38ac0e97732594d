import assert from "node:assert/strict";
import { compileTemplate, obj, ofType, props, single, str, type JsonObject } from "./arm.ts";

const dataReceiverRole = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0";
const dataSenderRole = "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39";

describe("infra: the optional topic through forwarding, compiled to ARM JSON by the pinned Bicep CLI", function () {
  this.timeout(120_000);
  let main: JsonObject;
  before(async function () {
    main = await compileTemplate("infra/main.bicep");
  });

  const serviceQueues = () =>
    ofType(main, "Microsoft.ServiceBus/namespaces/queues").filter((q) => q.symbol === "serviceQueues");

  it("creates the topic with duplicate detection only when topicName is given", function () {
    const topic = single(main, "Microsoft.ServiceBus/namespaces/topics");
    assert.equal(props(topic).requiresDuplicateDetection, true);
    assert.match(
      str(topic.raw.condition, "condition"),
      /not\(equals\(parameters\('topicName'\), null\(\)\)\)/,
    );
  });

  it("creates the template's queueName queue only without a topic; the outputs name the worker's queue either way", function () {
    const [plain, ...more] = ofType(main, "Microsoft.ServiceBus/namespaces/queues").filter(
      (q) => q.symbol === "queue",
    );
    assert.ok(plain, "the queue resource");
    assert.equal(more.length, 0);
    assert.equal(str(plain.raw.condition, "condition"), "[equals(parameters('topicName'), null())]");
    const outputs = obj(main.outputs, "outputs");
    assert.deepEqual(
      obj(outputs.SERVICEBUS_QUEUE, "SERVICEBUS_QUEUE").value,
      "[variables('workerQueueName')]",
    );
    // The module's queue without a topic; with one, the worker's own queue in the namespace.
    assert.equal(
      str(obj(outputs.SERVICEBUS_QUEUE_RESOURCE_ID, "SERVICEBUS_QUEUE_RESOURCE_ID").value),
      "[coalesce(tryGet(tryGet(reference('serviceBus').outputs, 'queueResourceId'), 'value'), " +
        "format('{0}/queues/{1}', reference('serviceBus').outputs.resourceId.value, variables('workerQueueName')))]",
    );
  });

  it("gives each consuming service a queue of its name with duplicate detection and the queue's settings", function () {
    const [queue, ...more] = serviceQueues();
    assert.ok(queue, "a looped queue resource");
    assert.equal(more.length, 0);
    assert.match(JSON.stringify(queue.raw.copy), /length\(parameters\('subscriptionNames'\)\)/);
    assert.match(str(queue.raw.condition, "condition"), /topicName/);
    assert.equal(
      queue.name,
      "[format('{0}/{1}', parameters('name'), parameters('subscriptionNames')[copyIndex()])]",
    );
    const p = props(queue);
    assert.equal(p.requiresDuplicateDetection, true);
    for (const name of ["duplicateDetectionHistoryTimeWindow", "lockDuration", "maxDeliveryCount"])
      assert.equal(p[name], `[parameters('${name}')]`, name);
  });

  it("forwards each subscription, and its dead-letter queue, to its service's queue, created first, with no rule of sbinbox's", function () {
    const subscription = single(main, "Microsoft.ServiceBus/namespaces/topics/subscriptions");
    assert.equal(
      subscription.name,
      "[format('{0}/{1}/{2}', parameters('name'), coalesce(parameters('topicName'), 'unused'), parameters('subscriptionNames')[copyIndex()])]",
    );
    // The queue of the same copy index: the subscription named X forwards to the queue named X.
    assert.equal(props(subscription).forwardTo, "[parameters('subscriptionNames')[copyIndex()]]");
    assert.deepEqual(
      [...new Set(subscription.raw.dependsOn as string[])],
      ["[format('serviceQueues[{0}]', copyIndex())]", "topic"],
    );
    // What the subscription itself dead-letters (its queue was full) follows to the queue once there is space.
    assert.equal(
      props(subscription).forwardDeadLetteredMessagesTo,
      "[parameters('subscriptionNames')[copyIndex()]]",
    );
    // The default true filter Service Bus creates stays; nothing depends on a rule being added or removed.
    assert.equal(ofType(main, "Microsoft.ServiceBus/namespaces/topics/subscriptions/rules").length, 0);
  });

  it("points the worker, its roles and its autoscale at its own queue, named consumerName with a topic", function () {
    assert.equal(
      obj(main.variables, "variables").workerQueueName,
      "[if(equals(parameters('topicName'), null()), parameters('queueName'), parameters('consumerName'))]",
    );
    assert.ok(
      (obj(main.variables, "variables").subscriptionNames as string).includes("parameters('consumerName')"),
    );
    const moduleParams = (name: string) =>
      obj(obj(obj(obj(main.resources, "resources")[name], name).properties, "props").parameters, "params");
    const appSettings = obj(obj(moduleParams("worker").appSettings, "appSettings").value, "value");
    assert.equal(appSettings.SBINBOX_QUEUE, "[variables('workerQueueName')]");
    assert.equal(appSettings.SBINBOX_TOPIC, undefined);
    assert.equal(appSettings.SBINBOX_SUBSCRIPTION, undefined);
    assert.equal(appSettings.SBINBOX_CONSUMER, "[parameters('consumerName')]");
    assert.deepEqual(moduleParams("roles").queueName, { value: "[variables('workerQueueName')]" });
    assert.deepEqual(moduleParams("autoscale").queueName, { value: "[variables('workerQueueName')]" });
  });

  it("gives the worker no right on the topic: receiver and sender on its queue; publishers send to the topic", function () {
    const roles = ofType(main, "Microsoft.Authorization/roleAssignments");
    const bySymbol = (symbol: string) => {
      const found = roles.find((r) => r.symbol === symbol);
      assert.ok(found, symbol);
      return found;
    };
    const queueScope =
      "[resourceId('Microsoft.ServiceBus/namespaces/queues', parameters('namespaceName'), parameters('queueName'))]";
    for (const symbol of ["receiverRole", "queueRetrySenderRole"]) {
      const role = bySymbol(symbol);
      assert.equal(role.raw.scope, queueScope, symbol);
      assert.equal(role.raw.condition, undefined, `${symbol} applies with or without a topic`);
      assert.match(str(props(role).principalId), /receiverPrincipalId/);
    }
    assert.equal(
      obj(bySymbol("receiverRole").template.variables, "variables").dataReceiverRoleId,
      dataReceiverRole,
    );
    const onTopic = roles.filter((r) => str(r.raw.scope ?? "").includes("namespaces/topics"));
    assert.deepEqual(
      onTopic.map((r) => r.symbol),
      ["topicSenderRoles"],
    );
    assert.match(str(props(onTopic[0]!).principalId), /senders/);
    assert.equal(obj(onTopic[0]!.template.variables, "variables").dataSenderRoleId, dataSenderRole);
  });
});
