import assert from "node:assert/strict";
import { z } from "zod";
import { HandlerRegistry } from "../../src/domain/envelope.ts";
import type { MessageContext, TransactionalHandler } from "../../src/domain/handler.ts";
import { DoNotRetryError } from "../../src/domain/errors.ts";
import { InvalidKeysError, messageKeys } from "../../src/domain/keys.ts";

const context: MessageContext = {
  messageId: "m",
  attempt: 1,
  consumer: "c",
  type: "T",
  deliveryCount: 0,
  applicationProperties: {},
  sessionId: "s-1",
  partitionKey: "p-1",
};

function handler(keys?: (body: unknown, ctx: MessageContext) => unknown): TransactionalHandler {
  return {
    kind: "transactional",
    type: "T",
    schema: z.unknown(),
    handle: () => Promise.resolve(),
    ...(keys === undefined ? {} : { keys: keys as () => string }),
  };
}

describe("a handler's keys", function () {
  it("none declared: unkeyed; a string: one key; an array: its distinct keys; the context's session and partition", function () {
    assert.equal(messageKeys(handler(), {}, context), undefined);
    assert.deepEqual(
      messageKeys(
        handler(() => "a"),
        {},
        context,
      ),
      ["a"],
    );
    assert.deepEqual(
      messageKeys(
        handler(() => ["a", "b", "a"]),
        {},
        context,
      ),
      ["a", "b"],
    );
    assert.deepEqual(
      messageKeys(
        handler((_b, c) => [`session:${c.sessionId}`, `partition:${c.partitionKey}`]),
        {},
        context,
      ),
      ["session:s-1", "partition:p-1"],
    );
  });

  it("anything else is an InvalidKeysError (a DoNotRetryError) naming the handler and what was wrong", function () {
    const cases: [() => unknown, RegExp][] = [
      [() => "", /returned an empty string$/],
      [() => [], /returned an empty array/],
      [() => null, /returned null, not a string or an array of strings/],
      [() => ({ id: 1 }), /returned an object, not a string/],
      [() => ["a", 7], /returned number 7 at index 1, not a non-empty string/],
      [
        () => {
          throw new TypeError("body.account is undefined");
        },
        /threw TypeError: body.account is undefined/,
      ],
    ];
    for (const [keys, problem] of cases) {
      assert.throws(
        () => messageKeys(handler(keys), {}, context),
        (error: unknown) => {
          assert.ok(error instanceof InvalidKeysError);
          assert.ok(error instanceof DoNotRetryError, "dead-lettered at once as NotRetryable");
          assert.match(error.message, /^the handler of "T": keys\(\) /);
          assert.match(error.message, problem);
          return true;
        },
      );
    }
  });

  it("a registry refuses keys that are not a function, at start-up", function () {
    const bad = { ...handler(), keys: "account" } as unknown as TransactionalHandler;
    assert.throws(() => new HandlerRegistry([bad]), /handler "T" has keys that are not a function/);
  });
});
