import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { ServiceBusClient, type ServiceBusReceivedMessage } from "@azure/service-bus";
import type { Database } from "../../src/app/database.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { SettlementScheduler } from "../../src/servicebus/settlement.ts";
import { waitUntil } from "../helpers/broker.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

/**
 * The scenarios that need no broker internals, against the official Service Bus emulator (CI's emulator job sets
 * SBINBOX_TEST_SERVICEBUS_CONNECTION_STRING; its queue `sbinbox` comes from config/emulator.Config.json).
 */
const connectionString = process.env.SBINBOX_TEST_SERVICEBUS_CONNECTION_STRING;
const QUEUE = process.env.SBINBOX_TEST_SERVICEBUS_QUEUE ?? "sbinbox";

if (connectionString) {
  describe("worker against the Service Bus emulator", function () {
    this.timeout(120_000);
    let client: ServiceBusClient;
    let db: Database;
    const run = randomUUID().slice(0, 8);

    before(async () => {
      client = new ServiceBusClient(connectionString);
      db = await exampleDatabase("worker_emulator");
    });
    after(async () => {
      await client?.close();
      await db?.close();
    });

    async function deadLetters(ids: readonly string[]): Promise<ServiceBusReceivedMessage[]> {
      const dlq = client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
      const found: ServiceBusReceivedMessage[] = [];
      try {
        const deadline = Date.now() + 30_000;
        while (found.length < ids.length && Date.now() < deadline) {
          for (const m of await dlq.receiveMessages(20, { maxWaitTimeInMs: 1_000 })) {
            await dlq.completeMessage(m);
            if (ids.includes(String(m.messageId))) found.push(m);
          }
        }
      } finally {
        await dlq.close();
      }
      return found;
    }

    it("fresh and resent: one effect, completed; poison dead-lettered with its reason", async function () {
      const publisher = createPublisher({ client, queue: QUEUE });
      const fresh = await publisher.publish("AccountCredited", `emu-${run}-1`, { accountId: "e", amount: 2 });
      await publisher.publish("AccountCredited", `emu-${run}-1`, { accountId: "e", amount: 2 });
      const poison = await publisher.publish("AccountCredited", `emu-${run}-2`, {
        accountId: "e",
        amount: "2",
      });
      await publisher.close();
      const worker = startTestWorker({ client, db, queue: QUEUE });
      try {
        await waitUntil(
          () => worker.stats.committed >= 1 && worker.stats.poison >= 1,
          "both are handled",
          60_000,
        );
      } finally {
        await worker.stop();
      }
      assert.equal((await creditsPerMessage(db)).get(fresh.messageId), 1);
      const [dead] = await deadLetters([poison.messageId]);
      assert.equal(dead?.deadLetterReason, "SchemaViolation");
      assert.match(dead?.deadLetterErrorDescription ?? "", /amount/);
    });

    it("a complete and a dead-letter issued together on consecutive deliveries both take effect", async function () {
      const ids = [`emu-${run}-a`, `emu-${run}-b`];
      const sender = client.createSender(QUEUE);
      await sender.sendMessages(ids.map((messageId) => ({ messageId, body: messageId })));
      await sender.close();
      const receiver = client.createReceiver(QUEUE, { maxAutoLockRenewalDurationInMs: 0 });
      const got: ServiceBusReceivedMessage[] = [];
      try {
        const deadline = Date.now() + 30_000;
        while (got.length < 2 && Date.now() < deadline) {
          for (const m of await receiver.receiveMessages(2, { maxWaitTimeInMs: 2_000 })) {
            if (ids.includes(String(m.messageId))) got.push(m);
            else await receiver.abandonMessage(m);
          }
        }
        assert.equal(got.length, 2);
        const scheduler = new SettlementScheduler();
        await Promise.all([
          scheduler.settle("complete", () => receiver.completeMessage(got[0]!)),
          scheduler.settle("dead_letter", () =>
            receiver.deadLetterMessage(got[1]!, {
              deadLetterReason: "Test",
              deadLetterErrorDescription: "beside a complete",
            }),
          ),
        ]);
      } finally {
        await receiver.close();
      }
      const dead = await deadLetters([String(got[1]!.messageId)]);
      assert.equal(dead.length, 1);
      assert.equal(dead[0]?.deadLetterReason, "Test");
    });
  });
}
