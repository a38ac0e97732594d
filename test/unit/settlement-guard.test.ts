import assert from "node:assert/strict";
import { ServiceBusError, type ServiceBusReceivedMessage, type ServiceBusReceiver } from "@azure/service-bus";
import {
  logSettlementFailure,
  SettlementGuard,
  SettlementUnconfirmedError,
} from "../../src/servicebus/settlement-guard.ts";
import { EventEmitter } from "node:events";
import { capturedLogs } from "../helpers/logs.ts";

const message = (lockedUntilUtc?: Date) =>
  ({ messageId: "m-1", body: undefined, lockedUntilUtc }) as unknown as ServiceBusReceivedMessage;

describe("SettlementGuard and its log line", function () {
  it("the SDK's AggregateError is unwrapped: each attempt's name, code and message, the last code as the line's", () => {
    const { logger, lines } = capturedLogs();
    const timedOut = new ServiceBusError("Operation to settle the message has timed out.", "ServiceTimeout");
    const lost = new ServiceBusError("The lock supplied is invalid.", "MessageLockLost");
    logSettlementFailure(logger, message(), "complete", new AggregateError([timedOut, timedOut, lost]));
    const [line] = lines;
    assert.equal(
      line?.msg,
      "settlement failed; the broker redelivers it when its lock expires, and the inbox completes the redelivery as a duplicate",
    );
    assert.equal(line?.code, "MessageLockLost");
    assert.deepEqual(line?.causes, [
      { name: "ServiceBusError", code: "ServiceTimeout", message: timedOut.message },
      { name: "ServiceBusError", code: "ServiceTimeout", message: timedOut.message },
      { name: "ServiceBusError", code: "MessageLockLost", message: lost.message },
    ]);
  });

  it("a settlement given up on says what happened and what follows, by disposition", () => {
    const { logger, lines } = capturedLogs();
    const lockedUntil = new Date("2026-01-01T00:00:00Z");
    logSettlementFailure(
      logger,
      message(),
      "abandon",
      new SettlementUnconfirmedError("link-closed", 12, lockedUntil),
    );
    logSettlementFailure(
      logger,
      message(),
      "dead_letter",
      new SettlementUnconfirmedError("lock-expired", 5_000, lockedUntil),
    );
    assert.deepEqual(
      lines.map((l) => [l.level, l.msg, l.reason, l.waitedMs, l.lockedUntil]),
      [
        [
          "warn",
          "abandon not confirmed: the link the message came on closed; stopped waiting for it; unless it took effect, the broker redelivers it when its lock expires, as the abandon would have",
          "link-closed",
          12,
          "2026-01-01T00:00:00.000Z",
        ],
        [
          "warn",
          "dead_letter not confirmed: no answer before the message's lock expired (a silent link); stopped waiting for it; unless it took effect, the broker redelivers it when its lock expires, and it is decided (and dead-lettered) again",
          "lock-expired",
          5_000,
          "2026-01-01T00:00:00.000Z",
        ],
      ],
    );
  });

  it("an unanswered settlement ends at the lock's expiry; a late answer is reported, not thrown", async () => {
    const late: unknown[] = [];
    const guard = new SettlementGuard({ minWaitMs: 50, onLateOutcome: (_m, error) => late.push(error) });
    let fail: (error: Error) => void = () => undefined;
    const never = new Promise<void>((_, reject) => (fail = reject));
    const began = Date.now();
    const settling = guard.settle(message(new Date(began + 200)), () => never);
    assert.equal(guard.pending, 1);
    const error = await settling.then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(error instanceof SettlementUnconfirmedError);
    assert.equal(error.reason, "lock-expired");
    assert.ok(Date.now() - began >= 190, "not before the lock expires");
    assert.equal(guard.pending, 0);
    fail(new Error("answered after all"));
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(
      late.map((e) => (e as Error).message),
      ["answered after all"],
    );
  });

  it("an answered settlement passes through: its success, or the SDK's own error", async () => {
    const guard = new SettlementGuard({ minWaitMs: 50 });
    await guard.settle(message(new Date(Date.now() + 10_000)), () => Promise.resolve());
    const lost = new ServiceBusError("The lock supplied is invalid.", "MessageLockLost");
    await assert.rejects(
      guard.settle(message(new Date(Date.now() + 10_000)), () => Promise.reject(lost)),
      (e) => e === lost,
    );
    assert.equal(guard.pending, 0);
  });

  it("a link gone: the stale renewal is stopped through the SDK's renewer; without it, one warning however often", async () => {
    // rhea's link as the guard reads it off a message (delivery.link): open, then closed by the test.
    const connection = Object.assign(new EventEmitter(), { is_open: () => true });
    const linkOn = (name: string) => {
      let open = true;
      const link = Object.assign(new EventEmitter(), { name, connection, is_open: () => open });
      const close = () => {
        open = false;
        link.emit("receiver_close");
      };
      const m = { messageId: name, lockedUntilUtc: new Date(Date.now() + 10_000), delivery: { link } };
      return { message: m as unknown as ServiceBusReceivedMessage, close };
    };
    const never = () => new Promise<void>(() => undefined);
    const giveUp = async (guard: SettlementGuard, receiver: object, name: string) => {
      const { message: m, close } = linkOn(name);
      const settling = guard.settle(m, never, receiver as ServiceBusReceiver);
      close();
      await assert.rejects(
        settling,
        (e) => e instanceof SettlementUnconfirmedError && e.reason === "link-closed",
      );
    };

    const stopped: string[] = [];
    const withRenewer = {
      _streamingReceiver: { _lockRenewer: { stop: (entity: { name: string }) => stopped.push(entity.name) } },
    };
    const quiet = capturedLogs();
    await giveUp(new SettlementGuard({ logger: quiet.logger }), withRenewer, "link-a");
    assert.deepEqual(stopped, ["link-a"], "the renewal under the old link's name is stopped");
    assert.equal(quiet.lines.length, 0);

    const { logger, lines } = capturedLogs();
    const guard = new SettlementGuard({ logger });
    await giveUp(guard, { _streamingReceiver: {} }, "link-b");
    await giveUp(guard, { _streamingReceiver: {} }, "link-c");
    const warnings = lines.filter((l) => String(l.msg).startsWith("cannot stop the SDK's lock renewal"));
    assert.equal(warnings.length, 1, "warned once");
    assert.equal(warnings[0]?.level, "warn");
  });

  it("a lock time that reads late (a skewed clock) is bounded by the entity's lock duration; a late success is reported", async () => {
    const late: unknown[] = [];
    const guard = new SettlementGuard({
      minWaitMs: 50,
      lockDurationMs: 200,
      onLateOutcome: (_, e) => late.push(e),
    });
    let answer: () => void = () => undefined;
    const began = Date.now();
    // The local clock an hour behind the broker's: lockedUntilUtc reads an hour away.
    const settling = guard.settle(
      message(new Date(began + 3_600_000)),
      () => new Promise<void>((resolve) => (answer = resolve)),
    );
    await assert.rejects(
      settling,
      (e) => e instanceof SettlementUnconfirmedError && e.reason === "lock-expired",
    );
    const waited = Date.now() - began;
    assert.ok(waited >= 190 && waited < 5_000, `gave up after ${waited} ms, at the lock duration`);
    answer();
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(late, [undefined], "the late success is reported (as no error)");
  });
});
