import assert from "node:assert/strict";
import { ServiceBusError, type ServiceBusReceivedMessage, type ServiceBusReceiver } from "@azure/service-bus";
import { keepLock } from "../../src/servicebus/lock-keeper.ts";
import { createLogger } from "../../src/telemetry/logger.ts";

/**
 * Under a credit budget a second, the keeper's tries for messages received together must not land in step: a
 * receiver that answers every renewal ServiceBusy records when each message was tried.
 */
describe("lock keeper: tries spread for messages received together", function () {
  it("eight messages locked at once are tried from 0.45 of the lock on, at times that differ", async function () {
    this.timeout(10_000);
    const tries: { id: string; at: number }[] = [];
    const busy = new ServiceBusError("throttled", "ServiceBusy");
    const receiver = {
      renewMessageLock: (m: ServiceBusReceivedMessage) => {
        tries.push({ id: String(m.messageId), at: Date.now() });
        return Promise.reject(busy);
      },
    } as unknown as ServiceBusReceiver;
    const start = Date.now();
    const lockedUntilUtc = new Date(start + 2_000);
    const stops = Array.from({ length: 8 }, (_, i) =>
      keepLock(
        receiver,
        { messageId: `m${i}`, lockToken: `t${i}`, lockedUntilUtc } as ServiceBusReceivedMessage,
        {
          lockDurationMs: 2_000,
          maxAutoLockRenewalMs: 60_000,
          entity: "q",
          logger: createLogger({ level: "error" }),
        },
      ),
    );
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    stops.forEach((stop) => stop());
    assert.ok(tries.length >= 8, `${tries.length} tries`);
    // none before 0.45 of the lock was left
    assert.ok(Math.min(...tries.map((t) => t.at - start)) >= 2_000 * 0.55 - 20);
    // every message tried at least once, and the first tries not in step (one 20 ms slot holds at most three)
    assert.equal(new Set(tries.map((t) => t.id)).size, 8);
    const firstTries = [...new Map(tries.reverse().map((t) => [t.id, t.at])).values()];
    const slots = new Map<number, number>();
    for (const at of firstTries) slots.set(Math.floor(at / 20), (slots.get(Math.floor(at / 20)) ?? 0) + 1);
    assert.ok(Math.max(...slots.values()) <= 3, `first tries in step: ${JSON.stringify([...slots])}`);
  });
});
