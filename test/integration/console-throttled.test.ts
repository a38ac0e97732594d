import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ServiceBusClient } from "@azure/service-bus";
import { createConsoleService, type ConsoleService, type Job } from "../../src/console/service.ts";
import { openArchive, readArchive } from "../../src/servicebus/dead-letter-archive.ts";
import { peekDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { OWN_RETRY } from "../../src/servicebus/throttling.ts";
import { Metric } from "../../src/telemetry/names.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { metricTotal, useTelemetryCapture } from "../helpers/telemetry.ts";
import { startCli } from "../helpers/cli.ts";
import { deadLetterMany } from "../helpers/dead-letters.ts";

const QUEUE = "console-throttled";
const THROTTLED = { management: { share: 0.3 }, receive: { share: 0.3 }, send: { share: 0.3 } } as const;

async function ended(service: ConsoleService, job: Job): Promise<Job> {
  await waitUntil(() => service.job(job.id)?.state !== "running", `job ${job.id} ended`, 90_000);
  return service.job(job.id)!;
}

/** Every message in the queue (receive-and-delete, so a count is exact), by MessageId. */
async function drainActive(client: ServiceBusClient): Promise<string[]> {
  const receiver = client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
  const ids: string[] = [];
  try {
    for (;;) {
      const batch = await receiver.receiveMessages(100, { maxWaitTimeInMs: 1_000 });
      if (batch.length === 0) break;
      ids.push(...batch.map((m) => String(m.messageId)));
    }
  } finally {
    await receiver.close();
  }
  return ids;
}

/**
 * The DLQ console (its service, as the page drives it) and `sbinbox dlq` while the namespace throttles about a
 * third of management, receive and send operations (ServerBusy). The queue has no duplicate detection, so a copy
 * sent twice would show. Nothing may be lost, doubled, or left neither replayed nor still dead-lettered, and the
 * run says what was throttled.
 */
describe("sbinbox console and dlq under throttling (ServerBusy at 30%: management, receive, send)", function () {
  this.timeout(180_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { MaxDeliveryCount: 100 } }));
  let dir: string;
  let client: ServiceBusClient;
  let service: ConsoleService;
  const telemetry = useTelemetryCapture();

  before(async function () {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-archive-"));
    await deadLetterMany(fixture.client, QUEUE, 20, (n) => (n < 10 ? "A" : n < 15 ? "B" : "C"));
    // The console's own client: one SDK try per call, each retried by the console while throttled.
    client = new ServiceBusClient(fixture.broker.connectionString, { retryOptions: OWN_RETRY });
    service = createConsoleService({
      client,
      entity: QUEUE,
      archive: (who) => openArchive(dir, QUEUE, who),
    });
  });
  afterEach(() => fixture.broker.throttle({}));
  after(async () => {
    await client?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("replays one reason and purges another: each replayed once, each purged archived once, the rest untouched, and the job says what was throttled", async function () {
    const before = fixture.broker.throttleCounts();
    fixture.broker.throttle(THROTTLED);
    const replayPlan = await service.plan("replay", { filter: { reason: "A" } }, "alice");
    assert.equal(replayPlan.count, 10);
    const replay = await ended(service, service.run(replayPlan.token, "alice"));
    const purgePlan = await service.plan("purge", { filter: { reason: "B" } }, "alice");
    assert.equal(purgePlan.count, 5);
    const purge = await ended(service, service.run(purgePlan.token, "alice"));
    const during = fixture.broker.throttleCounts();
    fixture.broker.throttle({});

    // The console's reads are peeks and receives (receive kind) and its replays sends; it makes no management
    // call of the management kind (no entity or rule reads), so that one has nothing to throttle here.
    for (const kind of ["receive", "send"] as const)
      assert.ok(
        during[kind].throttled > before[kind].throttled,
        `some ${kind} operations were throttled: ${JSON.stringify(during)}`,
      );
    assert.equal(replay.state, "done", JSON.stringify(replay.results.filter((r) => r.result !== "replayed")));
    assert.deepEqual(replay.counts, { replayed: 10 });
    assert.equal(purge.state, "done", JSON.stringify(purge.results.filter((r) => r.result !== "purged")));
    assert.deepEqual(purge.counts, { purged: 5 });
    // What the page shows under the results table ("Throttled by Service Bus (ServerBusy) and retried: ...").
    // Every throttled send is the console's own (a ServerBusy send is answered, so the console saw each one).
    const sendsSeen = (job: Job): number => Number(/send (\d+)/.exec(job.throttled ?? "")?.[1] ?? 0);
    assert.equal(sendsSeen(replay) + sendsSeen(purge), during.send.throttled - before.send.throttled);
    // A throttled receive on a link is held back, not refused (the client only gets its messages later), so what a
    // job can name is its refused peeks, receives by number and sends: the replay's sends at least.
    assert.match(replay.throttled ?? "", /send \d+/);

    // Nothing doubled: each replayed message's copy is in the queue exactly once.
    const copies = await drainActive(fixture.client);
    const expected = replay.results.map((r) => r.copyMessageId!).sort();
    assert.deepEqual([...copies].sort(), expected, "each copy once");
    // Nothing lost: the purged are archived once each; the other reason is still dead-lettered, untouched.
    const archived = readArchive(purge.archive!).map((e) => String(e.messageId));
    assert.deepEqual(archived.sort(), purge.results.map((r) => r.messageId).sort());
    const left = await peekDeadLetters(fixture.client, QUEUE);
    assert.deepEqual(
      left.map((m) => m.reason),
      Array.from({ length: 5 }, () => "C"),
    );
    process.stdout.write(
      `      replay throttled: ${replay.throttled}; purge throttled: ${purge.throttled}\n`,
    );
  });

  it("a plan's peeks refused (receive throttled at half): the count is still right, and sbinbox.servicebus.throttled counts them as receive", async function () {
    const before = fixture.broker.throttleCounts().receive.throttled;
    fixture.broker.throttle({ receive: { share: 0.5 } });
    let plans = 0;
    // Several plans, so that some peek is refused whatever the draw.
    for (; plans < 10 && fixture.broker.throttleCounts().receive.throttled === before; plans++) {
      const plan = await service.plan("replay", { filter: { reason: "C" } }, "alice");
      assert.equal(plan.count, 5, "the plan counts the dead letters left, throttled or not");
    }
    fixture.broker.throttle({});
    const refused = fixture.broker.throttleCounts().receive.throttled - before;
    assert.ok(refused > 0, `some peeks were refused in ${plans} plans`);
    const counted = metricTotal(await telemetry().collect(), Metric.throttled, {
      "sbinbox.servicebus.operation": "receive",
    });
    // A plan reads by peeks only (over $management, refused outright), so the console saw every refusal.
    assert.equal(counted, refused, "each refused peek counted as receive, as the broker counted it");
  });

  it("sbinbox dlq replay says what was throttled, and replays each message once", async function () {
    const before = fixture.broker.throttleCounts();
    fixture.broker.throttle(THROTTLED);
    const result = await startCli(["dlq", "replay", "--reason", "C"], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: QUEUE,
    }).done;
    fixture.broker.throttle({});
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /replayed 5 message\(s\) to console-throttled/);
    const line = /throttled by Service Bus \(ServerBusy\) and retried: (.*)/.exec(result.stdout)?.[1] ?? "";
    const sends = fixture.broker.throttleCounts().send.throttled - before.send.throttled;
    assert.ok(sends > 0, "some of its sends were throttled");
    assert.match(line, new RegExp(`send ${sends}\\b`), "it names every throttled send");
    const copies = await drainActive(fixture.client);
    assert.equal(copies.length, 5);
    assert.equal(new Set(copies).size, 5, "each copy once");
    assert.deepEqual(await peekDeadLetters(fixture.client, QUEUE), []);
    process.stdout.write(`      ${/throttled by .*/.exec(result.stdout)?.[0]}\n`);
  });
});
