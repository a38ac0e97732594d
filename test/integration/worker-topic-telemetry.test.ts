import assert from "node:assert/strict";
import type { Database } from "../../src/app/database.ts";
import { parseConfig, sbinboxTopic } from "../../src/localbroker/config.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { Attr, Metric } from "../../src/telemetry/names.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const config = parseConfig({ UserConfig: { Namespaces: [{ Name: "t", Queues: [{ Name: "unused" }] }] } });
config.topics = [sbinboxTopic("accounts", ["billing"])];

describe("worker telemetry on a subscription: the topic and the subscription named apart", function () {
  const fixture = useLocalBroker(config);
  const telemetry = useTelemetryCapture();
  let db: Database;
  before(async () => {
    db = await exampleDatabase("worker_topic_telemetry");
  });
  after(async () => {
    await db.close();
  });

  it("process and settlement spans and the consumed metric carry destination and subscription names", async function () {
    const publisher = createPublisher({ client: fixture.client, queue: "accounts" });
    await publisher.publish("AccountCredited", "sub-traced-1", { accountId: "a", amount: 1 });
    await publisher.close();
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: "accounts/Subscriptions/billing",
      consumer: "billing",
    });
    try {
      await waitUntil(() => worker.stats.settled === 1, "settled");
    } finally {
      await worker.stop();
    }
    const [process] = telemetry().spansNamed("process accounts/Subscriptions/billing");
    assert.ok(
      process,
      `spans: ${telemetry()
        .spans()
        .map((s) => s.name)
        .join(", ")}`,
    );
    assert.equal(process.attributes[Attr.destinationName], "accounts");
    assert.equal(process.attributes[Attr.subscriptionName], "billing");
    const [complete] = telemetry().spansNamed("complete accounts/Subscriptions/billing");
    assert.equal(complete?.attributes[Attr.subscriptionName], "billing");
    const data = await telemetry().collect();
    assert.equal(
      metricTotal(data, Metric.consumedMessages, {
        [Attr.destinationName]: "accounts",
        [Attr.subscriptionName]: "billing",
      }),
      1,
    );
  });
});
