import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { localConnectionString } from "../../src/localbroker/broker.ts";
import { createOutboxSender, type OutboxMessage } from "../../src/servicebus/outbox-sender.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { startFrameTap, type FrameTap } from "../helpers/frame-tap.ts";

const QUEUE = "ordered";

/**
 * A partitioned entity refuses a send whose messages have different partition keys, and a session id is the
 * partition key: every send of the relay and of the publisher must hold one session id (or none). The local broker
 * does not partition, so the sends are counted on the wire: one transfer delivery per send on the queue's link.
 */
describe("sends per session id (relay and publisher)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresSession: true } }));
  const plain = "plain";
  const plainFixture = useLocalBroker(brokerConfig({ [plain]: {} }));
  let tap: FrameTap;
  let client: ServiceBusClient;

  beforeEach(async () => {
    tap = await startFrameTap(fixture.broker.port);
    client = new ServiceBusClient(localConnectionString(tap.port), { retryOptions: { maxRetries: 0 } });
  });
  afterEach(async () => {
    await client.close();
    await tap.close();
  });

  /** Sends on links to `queue`: transfers that open a delivery, on a link the client attached to the queue. */
  function sendsTo(queue: string, on: FrameTap = tap): number {
    const links = new Set(
      on.clientFrames
        .filter((f) => f.name === "attach" && f.linkName?.startsWith(`${queue}-`))
        .map((f) => `${f.channel}:${f.handle}`),
    );
    return on.clientFrames.filter(
      (f) => f.name === "transfer" && f.deliveryId !== undefined && links.has(`${f.channel}:${f.handle}`),
    ).length;
  }

  /** The session's messages in the order received: messageId, or with `bodies` the body's `n`. */
  async function drainSession(sessionId: string, bodies = false): Promise<unknown[]> {
    const session = await fixture.client.acceptSession(QUEUE, sessionId, { receiveMode: "receiveAndDelete" });
    const got: unknown[] = [];
    try {
      for (;;) {
        const messages = await session.receiveMessages(50, { maxWaitTimeInMs: 300 });
        if (messages.length === 0) return got;
        for (const m of messages) got.push(bodies ? (m.body as { n: number }).n : m.messageId);
      }
    } finally {
      await session.close();
    }
  }

  it("the relay's sender sends each session key's rows as one send of their own, in their order", async () => {
    const keys = ["k1", "k2", "k3", "k4"];
    const rows: OutboxMessage[] = [];
    // Interleaved as a claim returns them (Id order): k1, k2, k3, k4, k1, ...
    for (let n = 0; n < 3; n++)
      for (const key of keys) rows.push(outboxRow(rows.length + 1, `${key}-${n}`, key));
    const sender = createOutboxSender({ client, queue: QUEUE });
    try {
      const report = await sender.send(rows);
      assert.deepEqual([...report.sent].sort(), rows.map((r) => r.id).sort());
      assert.deepEqual(report.retry, []);
      assert.equal(sendsTo(QUEUE), keys.length, "one send per session key");
    } finally {
      await sender.close();
    }
    for (const key of keys)
      assert.deepEqual(
        await drainSession(key),
        [0, 1, 2].map((n) => `${key}-${n}`),
      );
  });

  it("the relay's sender keeps rows without a key in batches, apart from keyed ones", async () => {
    const rows = ["a", "b", "c", "d"].map((m, i) => outboxRow(i + 1, m));
    const plainTap = await startFrameTap(plainFixture.broker.port);
    const plainClient = new ServiceBusClient(localConnectionString(plainTap.port));
    const sender = createOutboxSender({ client: plainClient, queue: plain });
    try {
      const report = await sender.send(rows);
      assert.equal(report.sent.length, 4);
      assert.equal(sendsTo(plain, plainTap), 1, "four rows without a key: one batch");
    } finally {
      await sender.close();
      await plainClient.close();
      await plainTap.close();
    }
  });

  it("publishBatch starts a new send where the session id changes, and keeps each key's order", async () => {
    const publisher = createPublisher({ client, queue: QUEUE });
    const events = [
      ...[0, 1, 2].map((n) => ({ type: "E", key: `a-${n}`, sessionId: "a", body: { n } })),
      ...[0, 1].map((n) => ({ type: "E", key: `b-${n}`, sessionId: "b", body: { n } })),
      { type: "E", key: "a-3", sessionId: "a", body: { n: 3 } },
    ];
    try {
      const results = await publisher.publishBatch(events);
      assert.equal(results.length, events.length);
      assert.equal(sendsTo(QUEUE), 3, "a, a, a | b, b | a: three sends");
    } finally {
      await publisher.close();
    }
    assert.deepEqual(await drainSession("a", true), [0, 1, 2, 3]);
    assert.deepEqual(await drainSession("b", true), [0, 1]);
  });
});

/** A claimed outbox row as the relay hands it to the sender. */
function outboxRow(id: number, messageId: string, sessionId?: string): OutboxMessage {
  return {
    id: String(id),
    messageId,
    type: "E",
    body: "{}",
    properties: null,
    correlationId: null,
    traceParent: null,
    traceState: null,
    ...(sessionId ? { sessionId } : {}),
  };
}
