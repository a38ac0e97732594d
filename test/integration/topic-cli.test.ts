import assert from "node:assert/strict";
import { defaultConfig } from "../../src/localbroker/config.ts";
import { serviceTopic } from "../../src/localbroker/service-topic.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { runCli } from "../helpers/cli.ts";

const config = defaultConfig();
const { topic, queues } = serviceTopic("accounts", ["billing", "ledger"]);
config.queues = queues;
config.topics = [topic];

/**
 * `sbinbox publish` to a topic and `sbinbox dlq` on a service's queue fed by it, as a user runs them: child processes
 * against the local broker.
 */
describe("sbinbox publish to a topic and dlq on a service's queue", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(config);
  const env = (extra: Record<string, string> = {}) => ({
    SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
    SBINBOX_TOPIC: "accounts",
    ...extra,
  });
  const count = (service: string) => fixture.broker.counts(service);

  it("publish sends to the topic: every service's queue gets each event once, a rerun is dropped at the topic", async function () {
    const first = await runCli(["publish", "--count", "25", "--run-id", "topic-cli"], env());
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /published 25 events to accounts/);
    const again = await runCli(["publish", "--count", "25", "--run-id", "topic-cli"], env());
    assert.equal(again.code, 0, again.stderr);
    assert.equal(count("billing").active, 25);
    assert.equal(count("ledger").active, 25);
    assert.equal(fixture.broker.topicCounts("accounts").duplicatesDropped, 25);
  });

  it("dlq lists and replays the dead letters of billing's queue; the copy reaches billing's queue alone", async function () {
    const receiver = fixture.client.createReceiver("billing");
    const messages = await receiver.receiveMessages(25, { maxWaitTimeInMs: 2_000 });
    assert.equal(messages.length, 25);
    const [dead, ...rest] = messages;
    await receiver.deadLetterMessage(dead!, {
      deadLetterReason: "RetriesExhausted",
      deadLetterErrorDescription: "test",
    });
    for (const m of rest) await receiver.completeMessage(m);
    await receiver.close();
    const ledgerBefore = count("ledger").active;

    const dlqEnv = {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: "billing",
    };
    const list = await runCli(["dlq", "list", "--json"], dlqEnv);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, new RegExp(String(dead!.messageId)));
    assert.match(list.stdout, /RetriesExhausted/);

    const replay = await runCli(["dlq", "replay", "--all"], dlqEnv);
    assert.equal(replay.code, 0, replay.stderr);
    await waitUntil(() => count("billing").active === 1, "the replayed copy is in billing");
    assert.equal(count("billing").deadLettered, 0);
    assert.equal(count("ledger").active, ledgerBefore, "ledger got no copy");

    const back = fixture.client.createReceiver("billing");
    const [copy] = await back.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    await back.completeMessage(copy!);
    await back.close();
    assert.equal(copy?.applicationProperties?.["sbinbox-original-key"], dead!.messageId);
    assert.equal(copy?.applicationProperties?.["sbinbox-subscription"], undefined, "no addressing needed");
  });

  it("refuses the removed subscription mode with the way to forwarding", async function () {
    const worker = await runCli(["dlq", "list"], env({ SBINBOX_SUBSCRIPTION: "billing" }));
    assert.equal(worker.code, 2, worker.stderr);
    assert.match(
      worker.stderr,
      /SBINBOX_SUBSCRIPTION: is no longer read: .*forwards to \(ForwardTo\); set SBINBOX_QUEUE/,
    );
    const onTopic = await runCli(["dlq", "list"], env());
    assert.notEqual(onTopic.code, 0);
    assert.match(onTopic.stderr, /SBINBOX_TOPIC: is where publish and the relay send/);
  });
});
