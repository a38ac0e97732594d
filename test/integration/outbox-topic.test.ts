import assert from "node:assert/strict";
import pg from "pg";
import { enqueue } from "../../src/outbox/enqueue.ts";
import { createPostgresOutboxStore } from "../../src/outbox/postgres/store.ts";
import { startRelay } from "../../src/outbox/relay.ts";
import { defaultConfig } from "../../src/localbroker/config.ts";
import { serviceTopic } from "../../src/localbroker/service-topic.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { createOutboxSender } from "../../src/servicebus/outbox-sender.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const config = defaultConfig();
const { topic, queues } = serviceTopic("notes", ["search", "audit"]);
config.queues = queues;
config.topics = [topic];

describe("outbox relay to a topic (real SDK, local broker)", function () {
  const fixture = useLocalBroker(config);

  it("sends each committed row to the topic once: every service's queue gets its copy through its subscription", async function () {
    const pool = new pg.Pool({ connectionString: await createTestDatabase("outbox topic"), max: 4 });
    const store = createPostgresOutboxStore({ pool });
    await store.migrate();
    const sender = createOutboxSender({ client: fixture.client, queue: "notes" });
    const relay = await startRelay({ store, sender, pollIntervalMs: 100, leaseMs: 60_000 });
    try {
      const client = await pool.connect();
      await client.query("BEGIN");
      for (let i = 0; i < 5; i++)
        await enqueue(client, { type: "NoteCreated", key: `n-${i}`, body: { noteId: i } });
      await client.query("COMMIT");
      client.release();
      await waitUntil(() => relay.counters.sent === 5, "the relay sent the five rows", 15_000);
    } finally {
      await relay.stop();
      await store.close();
      await pool.end();
    }
    for (const sub of ["search", "audit"]) {
      const receiver = fixture.client.createReceiver(sub, { receiveMode: "receiveAndDelete" });
      const got = await receiver.receiveMessages(10, { maxWaitTimeInMs: 1_000 });
      await receiver.close();
      assert.deepEqual(
        got.map((m) => m.messageId).sort(),
        [0, 1, 2, 3, 4].map((i) => deriveMessageId("NoteCreated", `n-${i}`)).sort(),
        sub,
      );
    }
  });
});
