/**
 * A team's handlers import DoNotRetryError and RetryAfterError from "sbinbox" (docs/handlers.md). Run from the
 * sources (SBINBOX_HANDLERS=./....ts, nothing built), that import must load; and a copy of the classes other than the
 * worker's (a build of the package beside the sources, a second install) must still be recognised: it was logged
 * as "transient" and given the whole retry schedule instead of NotRetryable.
 */
import assert from "node:assert/strict";
import { migrate } from "../../src/app/migrate.ts";
import { DoNotRetryError, RetryAfterError } from "../../src/domain/errors.ts";
import type * as Errors from "../../src/domain/errors.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { decideRetry, defaultRetryPolicy, retryClass } from "../../src/worker/retry-policy.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker } from "../helpers/broker.ts";
import { startCli } from "../helpers/cli.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const QUEUE = "refusing";
type ErrorsModule = typeof Errors;

describe("handler errors: one meaning whatever copy of sbinbox a module loads", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));

  it("a module run from its sources (SBINBOX_HANDLERS=./x.ts) throws DoNotRetryError: NotRetryable at once", async () => {
    const url = await createTestDatabase("handler_errors_copy");
    const module = "./test/fixtures/refusing-handlers/index.ts";
    await migrate({ database: { kind: "postgres", url }, module });
    await sendRawMessages(fixture.client, QUEUE, [
      { messageId: "refused-1", subject: "OrderRefused", body: Buffer.from('{"orderId":"o-1"}') },
    ]);
    const { child, done } = startCli(["worker"], {
      SBINBOX_HANDLERS: module,
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_POSTGRES_URL: url,
      SBINBOX_QUEUE: QUEUE,
      SBINBOX_HTTP_HOST: "127.0.0.1",
      PORT: "0",
    });
    let dead;
    try {
      const deadline = Date.now() + 40_000;
      while (!dead && child.exitCode === null && Date.now() < deadline) {
        [dead] = await takeDeadLetters(fixture.client, QUEUE, 1, 1_000);
      }
    } finally {
      child.kill("SIGTERM");
    }
    const result = await done;
    assert.ok(dead, `nothing dead-lettered; the worker said: ${result.stderr.slice(-1500)}`);
    assert.equal(dead.deadLetterReason, "NotRetryable");
    assert.match(String(dead.deadLetterErrorDescription), /a country we do not ship to/);
    assert.equal(dead.deliveryCount, 0, "dead-lettered on its first delivery, no retry");
    assert.doesNotMatch(result.stderr, /"errorClass":"transient"/);
  });

  it("a second copy of the classes (as dist/ beside src/) is recognised by its brand", async () => {
    // Another instance of the same module: classes with their own identity, as a built copy has.
    const copy = (await import(`../../src/domain/errors.ts?copy=${process.pid}`)) as ErrorsModule;
    assert.notEqual(copy.DoNotRetryError, DoNotRetryError, "the probe must load a second copy");
    const refused = new copy.DoNotRetryError("no");
    assert.ok(refused instanceof DoNotRetryError);
    assert.ok(!(new Error("no") instanceof DoNotRetryError));
    assert.equal(retryClass(refused, "permanent"), "permanent");
    const verdict = decideRetry(defaultRetryPolicy, {
      attempt: 1,
      errorClass: retryClass(refused, "permanent"),
      error: refused,
      lockRemainingMs: 60_000,
      attemptDurationMs: 1,
      random: 0.5,
    });
    assert.equal(verdict.action, "dead_letter");
    assert.equal(verdict.action === "dead_letter" && verdict.reason, "NotRetryable");

    const later = new copy.RetryAfterError(1_234);
    assert.ok(later instanceof RetryAfterError);
    assert.equal(retryClass(later, "permanent"), "transient");
    const wait = decideRetry(defaultRetryPolicy, {
      attempt: 1,
      errorClass: "transient",
      error: later,
      lockRemainingMs: 60_000,
      attemptDurationMs: 1,
      random: 0.5,
    });
    assert.equal(wait.action === "wait" && wait.delayMs, 1_234);
  });

  it("a subclass of DoNotRetryError is still told from its parent", () => {
    class Refused extends DoNotRetryError {}
    assert.ok(new Refused("x") instanceof DoNotRetryError);
    assert.ok(!(new DoNotRetryError("x") instanceof Refused));
  });
});
