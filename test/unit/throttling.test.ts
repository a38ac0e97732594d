import assert from "node:assert/strict";
import {
  retryWhileThrottled,
  SERVER_BUSY_WAIT_MS,
  ThrottledPastDeadlineError,
  throttledWaitMs,
  TRANSIENT_WAIT_MS,
} from "../../src/servicebus/throttling.ts";

/** The error the SDK gives for `com.microsoft:server-busy`. */
const busy = (): Error =>
  Object.assign(new Error("The request was terminated because the entity is being throttled."), {
    name: "ServiceBusError",
    code: "ServiceBusy",
    retryable: true,
  });

describe("retryWhileThrottled: every try bounded by the deadline", function () {
  it("waits Service Bus's 2 s jittered to 1-3 s", function () {
    assert.equal(
      throttledWaitMs(() => 0),
      SERVER_BUSY_WAIT_MS / 2,
    );
    assert.equal(
      throttledWaitMs(() => 0.5),
      SERVER_BUSY_WAIT_MS,
    );
    assert.equal(
      throttledWaitMs(() => 0.999),
      2_998,
    );
  });

  it("refused every time: stops at the deadline with ThrottledPastDeadlineError, no try started after it", async function () {
    const deadline = Date.now() + 1_200;
    const tries: number[] = [];
    let refusals = 0;
    const error = await retryWhileThrottled(
      () => {
        tries.push(Date.now());
        return Promise.reject(busy());
      },
      () => deadline,
      { onThrottled: () => (refusals += 1), random: () => 0 },
    ).catch((e: unknown) => e);
    const ended = Date.now();
    assert.ok(error instanceof ThrottledPastDeadlineError, String(error));
    assert.equal(error.refusals, refusals);
    assert.ok(refusals >= 2, `${refusals} refusals`);
    assert.ok(ended - deadline < 150, `ended ${ended - deadline} ms after the deadline`);
    assert.ok(
      tries.every((t) => t < deadline),
      "every try started before the deadline",
    );
  });

  it("a try that does not answer (an SDK retrying inside the call, 30 s apart) is given up on at the deadline, its signal aborted", async function () {
    const deadline = Date.now() + 400;
    let signal: AbortSignal | undefined;
    const error = await retryWhileThrottled(
      (s) => {
        signal = s;
        return new Promise<never>(() => undefined);
      },
      () => deadline,
      { onThrottled: () => undefined },
    ).catch((e: unknown) => e);
    assert.ok(error instanceof ThrottledPastDeadlineError);
    assert.ok(Date.now() - deadline < 150);
    assert.equal(signal?.aborted, true);
  });

  it("a deadline moved later while trying (a renewed lock) is followed", async function () {
    let deadline = Date.now() + 300;
    let tries = 0;
    const result = await retryWhileThrottled(
      () => {
        tries += 1;
        if (tries === 1) deadline += 3_000; // renewed during the first try
        return tries < 3 ? Promise.reject(busy()) : Promise.resolve("settled");
      },
      () => deadline,
      { onThrottled: () => undefined, random: () => 0 },
    );
    assert.equal(result, "settled");
    assert.equal(tries, 3);
  });

  it("any other error is thrown as it came, at once", async function () {
    const lost = Object.assign(new Error("lock lost"), { name: "ServiceBusError", code: "MessageLockLost" });
    let calls = 0;
    await assert.rejects(
      retryWhileThrottled(
        () => {
          calls += 1;
          return Promise.reject(lost);
        },
        () => Date.now() + 10_000,
        { onThrottled: () => undefined },
      ),
      (e) => e === lost,
    );
    assert.equal(calls, 1);
  });

  it("a transient error other than ServerBusy (retryable) is tried again transientRetries times, then thrown", async function () {
    this.timeout(10_000);
    const blip = (): Error =>
      Object.assign(new Error("connection lost"), {
        name: "ServiceBusError",
        code: "ServiceCommunicationProblem",
        retryable: true,
      });
    const tries: number[] = [];
    let throttled = 0;
    const error = await retryWhileThrottled(
      () => {
        tries.push(Date.now());
        return Promise.reject(blip());
      },
      () => Date.now() + 60_000,
      { onThrottled: () => (throttled += 1), transientRetries: 2 },
    ).catch((e: unknown) => e);
    assert.equal((error as { code?: string }).code, "ServiceCommunicationProblem");
    assert.equal(tries.length, 3, "the first try and two retries");
    assert.equal(throttled, 0, "a transient error is not counted as throttled");
    for (let i = 1; i < tries.length; i++)
      assert.ok(
        tries[i]! - tries[i - 1]! >= TRANSIENT_WAIT_MS - 20,
        `waited ${tries[i]! - tries[i - 1]!} ms`,
      );
  });

  it("one blip, then an answer: the call succeeds on its second try", async function () {
    this.timeout(5_000);
    let calls = 0;
    const value = await retryWhileThrottled(
      () => {
        calls += 1;
        if (calls === 1)
          return Promise.reject(
            Object.assign(new Error("timed out"), {
              name: "ServiceBusError",
              code: "ServiceTimeout",
              retryable: true,
            }),
          );
        return Promise.resolve("sent");
      },
      () => Date.now() + 60_000,
      { onThrottled: () => undefined, transientRetries: 2 },
    );
    assert.equal(value, "sent");
    assert.equal(calls, 2);
  });

  it("without transientRetries a transient error is thrown at once", async function () {
    const blip = Object.assign(new Error("connection lost"), {
      code: "ServiceCommunicationProblem",
      retryable: true,
    });
    let calls = 0;
    await assert.rejects(
      retryWhileThrottled(
        () => {
          calls += 1;
          return Promise.reject(blip);
        },
        () => Date.now() + 10_000,
        { onThrottled: () => undefined },
      ),
      (e) => e === blip,
    );
    assert.equal(calls, 1);
  });
});
