import assert from "node:assert/strict";
import { parseConfig, sbinboxTopic } from "../../src/localbroker/config.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { runCli } from "../helpers/cli.ts";

const config = parseConfig({ UserConfig: { Namespaces: [{ Name: "t", Queues: [{ Name: "unused" }] }] } });
config.topics = [sbinboxTopic("accounts", ["billing", "ledger"])];

/** `sbinbox publish` and `sbinbox dlq` on a topic, as a user runs them: child processes against the local broker. */
describe("sbinbox publish and dlq on a topic", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(config);
  const env = (extra: Record<string, string> = {}) => ({
    SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
    SBINBOX_TOPIC: "accounts",
    ...extra,
  });
  const count = (sub: string) => fixture.broker.counts(`accounts/Subscriptions/${sub}`);

  it("publish sends to the topic: every subscription gets each event once, a rerun is dropped at the topic", async function () {
    const first = await runCli(["publish", "--count", "25", "--run-id", "topic-cli"], env());
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /published 25 events to accounts/);
    const again = await runCli(["publish", "--count", "25", "--run-id", "topic-cli"], env());
    assert.equal(again.code, 0, again.stderr);
    assert.equal(count("billing").active, 25);
    assert.equal(count("ledger").active, 25);
    assert.equal(fixture.broker.topicCounts("accounts").duplicatesDropped, 25);
  });

  it("dlq lists and replays a subscription's dead letters; the copy reaches that subscription alone", async function () {
    const receiver = fixture.client.createReceiver("accounts", "billing");
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

    const list = await runCli(["dlq", "list", "--json"], env({ SBINBOX_SUBSCRIPTION: "billing" }));
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, new RegExp(String(dead!.messageId)));
    assert.match(list.stdout, /RetriesExhausted/);

    const replay = await runCli(["dlq", "replay", "--all"], env({ SBINBOX_SUBSCRIPTION: "billing" }));
    assert.equal(replay.code, 0, replay.stderr);
    await waitUntil(() => count("billing").active === 1, "the replayed copy is in billing");
    assert.equal(count("billing").deadLettered, 0);
    assert.equal(count("ledger").active, ledgerBefore, "ledger got no copy");

    const back = fixture.client.createReceiver("accounts", "billing");
    const [copy] = await back.receiveMessages(1, { maxWaitTimeInMs: 2_000 });
    await back.completeMessage(copy!);
    await back.close();
    assert.equal(copy?.applicationProperties?.["sbinbox-original-key"], dead!.messageId);
    assert.equal(copy?.applicationProperties?.["sbinbox-subscription"], "billing");
  });
});
