import assert from "node:assert/strict";
import {
  compileTemplate,
  obj,
  ofType,
  parameterDefault,
  props,
  single,
  str,
  type JsonObject,
} from "./arm.ts";

describe("infra/main.bicep: requiresSession on the worker's queue or subscription", function () {
  this.timeout(120_000);
  let main: JsonObject;
  before(async function () {
    main = await compileTemplate("infra/main.bicep");
  });

  it("is a parameter, off by default, passed to the queue and to the worker's subscription, and turns the worker's session mode on", function () {
    assert.equal(parameterDefault(main, "requiresSession"), false);
    const queue = single(main, "Microsoft.ServiceBus/namespaces/queues");
    assert.equal(props(queue).requiresSession, "[parameters('queueRequiresSession')]");
    assert.equal(parameterDefault(queue.template, "queueRequiresSession"), false);
    const [subscription] = ofType(main, "Microsoft.ServiceBus/namespaces/topics/subscriptions");
    assert.match(
      str(props(subscription!).requiresSession),
      /contains\(parameters\('sessionSubscriptionNames'\)/,
    );
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
