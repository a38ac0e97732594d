import assert from "node:assert/strict";
import {
  CopyProperty,
  decodeMessage,
  HandlerRegistry,
  retryState,
  type IncomingMessage,
} from "../../src/domain/envelope.ts";
import { PoisonMessageError, type PoisonReason } from "../../src/domain/errors.ts";
import { exampleHandlers } from "../../src/example/index.ts";

const registry = new HandlerRegistry(exampleHandlers());

function message(overrides: Partial<IncomingMessage>): IncomingMessage {
  return {
    messageId: "m1",
    body: Buffer.from(JSON.stringify({ accountId: "a", amount: 1 })),
    subject: "AccountCredited",
    contentType: "application/json",
    deliveryCount: 0,
    applicationProperties: {},
    ...overrides,
  };
}

function poison(m: IncomingMessage, maxBytes = 1024): PoisonMessageError {
  try {
    decodeMessage(m, registry, maxBytes);
  } catch (error) {
    if (error instanceof PoisonMessageError) return error;
    throw error;
  }
  assert.fail("expected poison");
}

describe("decoding a message", function () {
  it("bytes, a string, or an AMQP value all decode to the validated body", function () {
    for (const body of [
      Buffer.from('{"accountId":"a","amount":1}'),
      '{"accountId":"a","amount":1}',
      { accountId: "a", amount: 1 },
    ]) {
      const decoded = decodeMessage(message({ body }), registry, 1024);
      assert.equal(decoded.type, "AccountCredited");
      assert.deepEqual(decoded.body, { accountId: "a", amount: 1 });
    }
  });

  it("the type comes from the subject, else the application property `type`", function () {
    const decoded = decodeMessage(
      message({ subject: undefined, applicationProperties: { type: "AccountCredited" } }),
      registry,
      1024,
    );
    assert.equal(decoded.handler.type, "AccountCredited");
  });

  it("what can never succeed is poison, with a reason and a description naming the problem", function () {
    const cases: [Partial<IncomingMessage>, PoisonReason, RegExp, number?][] = [
      [{ body: Buffer.from("{oops") }, "UndecodableBody", /not valid JSON/],
      [{ body: Buffer.from([0xff, 0xfe, 0x7b]) }, "UndecodableBody", /UTF-8/],
      [{ contentType: "text/plain" }, "UndecodableBody", /text\/plain/],
      [{ body: null }, "UndecodableBody", /empty/],
      [{ subject: "Nope" }, "UnknownMessageType", /"Nope"/],
      [{ subject: undefined }, "UnknownMessageType", /subject/],
      [{ body: Buffer.from('{"accountId":"a"}') }, "SchemaViolation", /amount/],
      [{ body: Buffer.from('{"accountId":"a","amount":"1"}') }, "SchemaViolation", /amount/],
      [{}, "MessageTooLarge", /over the limit of 10/, 10],
    ];
    for (const [overrides, reason, description, maxBytes] of cases) {
      const error = poison(message(overrides), maxBytes);
      assert.equal(error.reason, reason, JSON.stringify(overrides));
      assert.match(error.message, description);
    }
  });

  it("a content type with parameters is still JSON", function () {
    assert.doesNotThrow(() =>
      decodeMessage(message({ contentType: "application/json; charset=utf-8" }), registry, 1024),
    );
  });

  it("a type registered twice is refused", function () {
    assert.throws(
      () => new HandlerRegistry([...exampleHandlers(), ...exampleHandlers()]),
      /already registered/,
    );
  });
});

describe("a message's retry state", function () {
  const base = (props: Record<string, unknown>): IncomingMessage => ({
    messageId: "copy-id",
    body: "{}",
    deliveryCount: 0,
    applicationProperties: props,
  });

  it("keys the inbox by the original key when a copy carries one, by the MessageId otherwise", function () {
    assert.deepEqual(retryState(base({})), {
      inboxKey: "copy-id",
      attempt: 1,
      replay: 0,
      claimId: undefined,
    });
    assert.deepEqual(
      retryState(
        base({
          [CopyProperty.originalKey]: "orig",
          [CopyProperty.attempt]: 4,
          [CopyProperty.replay]: 2,
          [CopyProperty.claimId]: "17",
        }),
      ),
      { inboxKey: "orig", attempt: 4, replay: 2, claimId: "17" },
    );
  });

  it("refuses copy properties of the wrong shape as poison, naming the property", function () {
    for (const [props, name] of [
      [{ [CopyProperty.originalKey]: 5 }, CopyProperty.originalKey],
      [{ [CopyProperty.originalKey]: "x".repeat(129) }, CopyProperty.originalKey],
      [{ [CopyProperty.attempt]: 0 }, CopyProperty.attempt],
      [{ [CopyProperty.attempt]: "two" }, CopyProperty.attempt],
      [{ [CopyProperty.claimId]: "1; DROP" }, CopyProperty.claimId],
    ] as const) {
      assert.throws(
        () => retryState(base(props)),
        (e: unknown) => e instanceof PoisonMessageError && e.message.includes(name),
      );
    }
  });
});
