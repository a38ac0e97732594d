import assert from "node:assert/strict";
import { SessionQueueReceiver } from "../../src/servicebus/session-receiver.ts";
import { silentLogger } from "../../src/telemetry/logger.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";

/**
 * A slot busy with a long message (a retry waiting in place) when the receiver is detached and started again (what
 * the worker does after a database outage): the old slot lives on beside the new ones.
 */
describe("session receiver: slots across detach and start (a database outage's restart)", () => {
  const fixture = useLocalBroker(brokerConfig({ q: { RequiresSession: true, LockDuration: "PT5S" } }));

  it("never holds more sessions at once than maxSessions", async () => {
    let release!: () => void;
    const blocked = new Promise<void>((r) => (release = r));
    const active = new Set<string>();
    const calls: string[] = [];
    let inHandle = 0;
    let mostInHandle = 0;
    let most = 0;
    const receiver = new SessionQueueReceiver({
      client: fixture.client,
      queue: "q",
      maxConcurrentCalls: 1,
      maxAutoLockRenewalMs: 0,
      maxSessions: 1,
      sessionIdleMs: 200,
      logger: silentLogger,
      handle: async (message) => {
        calls.push(`${message.messageId}#${message.deliveryCount}`);
        inHandle += 1;
        mostInHandle = Math.max(mostInHandle, inHandle);
        active.add(message.sessionId!);
        most = Math.max(most, active.size);
        if (message.sessionId === "A") await blocked;
        else await new Promise((r) => setTimeout(r, 300));
        active.delete(message.sessionId!);
        inHandle -= 1;
        return { disposition: "complete", outcome: "committed" } as never;
      },
    });
    const sender = fixture.client.createSender("q");
    await sender.sendMessages({ messageId: "a", sessionId: "A", body: "a" });
    receiver.start();
    await waitUntil(() => active.has("A"), "A in process");
    await receiver.detach(100); // as runOutage does once the database answers
    receiver.start();
    await sender.sendMessages({ messageId: "b", sessionId: "B", body: "b" });
    await new Promise((r) => setTimeout(r, 2000));
    await sender.sendMessages({ messageId: "a2", sessionId: "A", body: "a2" });
    await new Promise((r) => setTimeout(r, 1500));
    const snapshot = { most, mostInHandle, calls: [...calls], active: [...active] };
    release();
    // The old slot's message done, its place goes to the new start's slot, which takes B.
    await waitUntil(() => calls.includes("b#0"), "B taken once the old slot finished");
    await receiver.detach(1000);
    await sender.close();
    assert.ok(
      snapshot.mostInHandle <= 1,
      `sessions processed at once: ${snapshot.most} (maxSessions 1): ${JSON.stringify(snapshot)}`,
    );
  });
});
