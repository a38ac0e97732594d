import assert from "node:assert/strict";
import { compileTemplate, obj, ofType, parameterDefault, props, str, type JsonObject } from "./arm.ts";

describe("infra/main.bicep: requiresSession on the worker's queue (with a topic, its own queue)", function () {
  this.timeout(120_000);
  let main: JsonObject;
  before(async function () {
    main = await compileTemplate("infra/main.bicep");
  });

  it("is a parameter, off by default, passed to the queue and to the worker's own queue under a topic, and turns the worker's session mode on", function () {
    assert.equal(parameterDefault(main, "requiresSession"), false);
    const queues = ofType(main, "Microsoft.ServiceBus/namespaces/queues");
    const queue = queues.find((q) => q.symbol === "queue");
    assert.ok(queue, "the queue resource");
    assert.equal(props(queue).requiresSession, "[parameters('queueRequiresSession')]");
    assert.equal(parameterDefault(queue.template, "queueRequiresSession"), false);
    const serviceQueue = queues.find((q) => q.symbol === "serviceQueues");
    assert.ok(serviceQueue, "the services' queues");
    assert.match(
      str(props(serviceQueue).requiresSession),
      /contains\(parameters\('sessionSubscriptionNames'\)/,
    );
    // The subscription only forwards: Service Bus moves its messages to the session-enabled queue, session id kept.
    const [subscription] = ofType(main, "Microsoft.ServiceBus/namespaces/topics/subscriptions");
    assert.equal(props(subscription!).requiresSession, false);
    const modules = obj(main.resources, "resources");
    const serviceBus = obj(
      obj(obj(modules.serviceBus, "serviceBus").properties, "props").parameters,
      "params",
    );
    assert.match(str(obj(serviceBus.queueRequiresSession, "q").value), /parameters\('requiresSession'\)/);
    assert.match(JSON.stringify(serviceBus.sessionSubscriptionNames), /parameters\('consumerName'\)/);
    const worker = obj(obj(obj(modules.worker, "worker").properties, "props").parameters, "params");
    const settings = obj(obj(worker.appSettings, "appSettings").value, "value");
    assert.match(
      str(settings.SBINBOX_MAX_CONCURRENT_SESSIONS),
      /parameters\('requiresSession'\).*maxConcurrentSessions.*'0'/,
    );
  });
});
