import assert from "node:assert/strict";
import { DoNotRetryError, RetryAfterError } from "../../src/domain/errors.ts";
import {
  decideRetry,
  defaultRetryPolicy,
  describeFailure,
  IDEMPOTENCY_KEY_IN_USE,
  jittered,
  retryClass,
  type RetryInput,
  type RetryPolicy,
} from "../../src/worker/retry-policy.ts";

const noJitter: RetryPolicy = { ...defaultRetryPolicy, jitter: 0 };
const input = (over: Partial<RetryInput> = {}): RetryInput => ({
  attempt: 1,
  errorClass: "transient",
  error: new Error("503 from the mail API"),
  lockRemainingMs: 300_000,
  random: 0.5,
  ...over,
});

describe("retry policy", function () {
  it("waits the short delays under the lock and schedules the long ones, then gives up", function () {
    const verdicts = [1, 2, 3, 4, 5, 6, 7, 8].map((attempt) => decideRetry(noJitter, input({ attempt })));
    assert.deepEqual(
      verdicts.map((v) =>
        v.action === "dead_letter" ? v.reason : `${v.action} ${v.delayMs} -> ${v.attempt}`,
      ),
      [
        "wait 1000 -> 2",
        "wait 5000 -> 3",
        "wait 30000 -> 4",
        "schedule 120000 -> 5",
        "schedule 600000 -> 6",
        "schedule 1800000 -> 7",
        "schedule 3600000 -> 8",
        "RetriesExhausted",
      ],
    );
  });

  it("rides out a downstream outage of 82 minutes whatever the jitter; the whole tail stays under a day", function () {
    const delays = defaultRetryPolicy.transientDelaysMs;
    const total = delays.reduce((a, b) => a + b, 0);
    assert.equal(total, 6_156_000);
    assert.ok(total * (1 - defaultRetryPolicy.jitter) >= 82 * 60_000, "the shortest draw of the tail");
    assert.ok(total * (1 + defaultRetryPolicy.jitter) < 24 * 3_600_000, "far under the queue's 14-day TTL");
  });

  it("waits a listed delay up to the max wait in place, the jittered value capped at the max wait", function () {
    // 30 s drawn to 36 s (random near 1) would exceed the 30 s max wait half the time without the cap.
    const high = decideRetry(defaultRetryPolicy, input({ attempt: 3, random: 0.999 }));
    assert.deepEqual(high, { action: "wait", attempt: 4, delayMs: 30_000 });
    const low = decideRetry(defaultRetryPolicy, input({ attempt: 3, random: 0 }));
    assert.deepEqual(low, { action: "wait", attempt: 4, delayMs: 24_000 });
    // A listed delay over the max wait is scheduled, even when jitter draws it under.
    const scheduled = decideRetry(defaultRetryPolicy, input({ attempt: 4, random: 0 }));
    assert.deepEqual(scheduled, { action: "schedule", attempt: 5, delayMs: 96_000 });
  });

  it("keeps lock time for the retry's own run: the failed attempt's duration is added to the margin", function () {
    // 5 s wait + 10 s margin fits in 20 s; with an attempt that ran 6 s it no longer does.
    assert.equal(decideRetry(noJitter, input({ attempt: 2, lockRemainingMs: 20_000 })).action, "wait");
    const slow = decideRetry(
      noJitter,
      input({ attempt: 2, lockRemainingMs: 20_000, attemptDurationMs: 6_000 }),
    );
    assert.deepEqual(slow, { action: "schedule", attempt: 3, delayMs: 5_000 });
    const fits = decideRetry(
      noJitter,
      input({ attempt: 2, lockRemainingMs: 21_000, attemptDurationMs: 6_000 }),
    );
    assert.equal(fits.action, "wait");
  });

  it("schedules a delay that would outlast the lock, even if short", function () {
    const v = decideRetry(noJitter, input({ attempt: 2, lockRemainingMs: 14_000 }));
    assert.equal(v.action, "schedule", "5 s + the 10 s margin does not fit in 14 s");
    assert.equal(decideRetry(noJitter, input({ attempt: 2, lockRemainingMs: 15_000 })).action, "wait");
    assert.equal(decideRetry(noJitter, input({ lockRemainingMs: undefined })).action, "schedule");
  });

  it("gives permanent failures the short permanent schedule", function () {
    const first = decideRetry(noJitter, input({ errorClass: "permanent" }));
    assert.deepEqual(first, { action: "wait", attempt: 2, delayMs: 5_000 });
    const second = decideRetry(noJitter, input({ attempt: 2, errorClass: "permanent" }));
    assert.equal(second.action, "dead_letter");
    const none = decideRetry({ ...noJitter, permanentDelaysMs: [] }, input({ errorClass: "permanent" }));
    assert.equal(none.action, "dead_letter");
  });

  it("honours a handler's RetryAfterError and DoNotRetryError", function () {
    const after = decideRetry(noJitter, input({ error: new RetryAfterError(90_000) }));
    assert.deepEqual(after, { action: "schedule", attempt: 2, delayMs: 90_000 });
    const exhausted = decideRetry(noJitter, input({ attempt: 8, error: new RetryAfterError(10) }));
    assert.equal(exhausted.action, "dead_letter", "a retry-after still counts against the schedule");
    const stop = decideRetry(noJitter, input({ error: new DoNotRetryError("card declined") }));
    assert.equal(stop.action, "dead_letter");
    assert.equal(stop.action === "dead_letter" && stop.reason, "NotRetryable");
    assert.throws(() => new RetryAfterError(-1), /delayMs must be a non-negative number/);
  });

  it("spreads delays by the jitter fraction, both ways", function () {
    assert.equal(jittered(1_000, 0.2, 0), 800);
    assert.equal(jittered(1_000, 0.2, 0.5), 1_000);
    assert.equal(jittered(1_000, 0.2, 0.999_999), 1_200);
    assert.equal(jittered(1_000, 0, 0.9), 1_000);
  });

  it("describes the last error by class, name and message, bounded, never anything else", function () {
    const text = describeFailure(6, "transient", new TypeError("socket hang up"));
    assert.equal(text, "after 6 attempts: transient TypeError: socket hang up");
    assert.ok(describeFailure(1, "permanent", new Error("x".repeat(5_000))).length <= 1024);
  });

  it("names the handler and the refused statement, which a long message does not push out", function () {
    const source = { handler: "orders.OrderPlaced", statement: "SELECT 1 WHERE $1::text IS NOT NULL" };
    assert.equal(
      describeFailure(2, "permanent", new Error("bind message supplies 2 parameters"), source),
      'after 2 attempts: permanent Error: bind message supplies 2 parameters (handler "orders.OrderPlaced", ' +
        'statement "SELECT 1 WHERE $1::text IS NOT NULL")',
    );
    const long = describeFailure(1, "permanent", new Error("x".repeat(5_000)), source);
    assert.ok(long.length <= 1024, `${long.length}`);
    assert.ok(long.endsWith(`statement "${source.statement}")`), long.slice(-80));
  });

  it("retries a missing table or column on the bounded migration schedule, other permanent failures on theirs", function () {
    const policy = { ...noJitter, permanentDelaysMs: [5], migrationDelaysMs: [10, 20] };
    const migration = (attempt: number) =>
      decideRetry(policy, input({ attempt, errorClass: "permanent", awaitsMigration: true }));
    assert.deepEqual(migration(1), { action: "wait", attempt: 2, delayMs: 10 });
    assert.deepEqual(migration(2), { action: "wait", attempt: 3, delayMs: 20 });
    assert.equal(migration(3).action, "dead_letter");
    assert.equal(
      decideRetry(policy, input({ attempt: 2, errorClass: "permanent", awaitsMigration: false })).action,
      "dead_letter",
    );
    // Without a list of its own, the default one: bounded, and longer than the permanent one.
    const { migrationDelaysMs: _, ...withoutList } = policy;
    assert.equal(
      decideRetry(withoutList, input({ attempt: 4, errorClass: "permanent", awaitsMigration: true })).action,
      "schedule",
    );
    assert.equal(
      decideRetry(withoutList, input({ attempt: 5, errorClass: "permanent", awaitsMigration: true })).action,
      "dead_letter",
    );
  });
});

describe("retry class of a failure", function () {
  it("keeps the store's class for mssql's refusal of a parameter (EPARAM), the handler's mistake on every attempt", function () {
    const refused = Object.assign(new Error("Validation failed for parameter 'p1'. Invalid string."), {
      name: "RequestError",
      code: "EPARAM",
    });
    assert.equal(retryClass(refused, "permanent"), "permanent");
  });

  it("keeps the database's own classes, and judges a handler's other errors", function () {
    const sqlstate = Object.assign(new Error("duplicate key on orders"), { code: "23505" });
    assert.equal(retryClass(sqlstate, "permanent"), "permanent", "a constraint violation in the handler");
    assert.equal(retryClass(new Error("deadlock"), "transient"), "transient");
    assert.equal(retryClass(new TypeError("x is undefined"), "permanent"), "permanent", "a bug");
    const fetchFailed = new TypeError("fetch failed", {
      cause: Object.assign(new Error("connect"), { code: "ECONNREFUSED" }),
    });
    assert.equal(retryClass(fetchFailed, "permanent"), "transient", "a network cause outweighs TypeError");
    assert.equal(retryClass(Object.assign(new Error("busy"), { status: 503 }), "permanent"), "transient");
    assert.equal(retryClass(Object.assign(new Error("bad"), { status: 400 }), "permanent"), "permanent");
    assert.equal(retryClass(Object.assign(new Error("slow"), { statusCode: 429 }), "permanent"), "transient");
    assert.equal(retryClass(new Error("downstream said no"), "permanent"), "transient");
    const inUse = Object.assign(new Error("key in use"), { status: 409, code: IDEMPOTENCY_KEY_IN_USE });
    assert.equal(
      retryClass(inUse, "permanent"),
      "transient",
      "a same-key call still running is not a refusal",
    );
    const wrapped = new Error("send failed", { cause: inUse });
    assert.equal(retryClass(wrapped, "permanent"), "transient", "also as the cause");
    const conflict = Object.assign(new Error("conflict"), { status: 409, code: "resource_exists" });
    assert.equal(retryClass(conflict, "permanent"), "permanent", "any other 409 stays permanent");
    assert.equal(retryClass(new DoNotRetryError("declined"), "transient"), "permanent");
    assert.equal(retryClass(new RetryAfterError(10), "permanent"), "transient");
  });
});
