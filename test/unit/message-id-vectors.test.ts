import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import fc from "fast-check";
import * as uuid from "uuid";
import {
  DNS_NAMESPACE,
  MESSAGE_ID_NAMESPACE,
  deriveMessageId,
  replayMessageId,
  retryMessageId,
  uuidV5,
} from "../../src/servicebus/message-id.ts";
import { enqueue, type OutboxTransaction } from "../../src/outbox/enqueue.ts";

// MessageIds are persisted identities (inbox keys, the broker's duplicate detection): the vectors were computed with
// the `uuid` package's v5 before the derivation was rewritten, and any implementation must keep producing them. They
// live in one JSON file that every publisher reads (the .NET and Python ones too, scripts/publishers-check.ts). The
// repeated keys put the name (16 namespace bytes + "T:" + key) on both sides of SHA-1's 55- and 119-byte padding
// boundaries.
interface Vectors {
  namespace: string;
  derived: { type: string; key: string; messageId: string }[];
  uuidV5: { namespace: string; name: string; id: string }[];
  retry: { inboxKey: string; replay: number; attempt: number; messageId: string }[];
  replay: { inboxKey: string; replay: number; messageId: string }[];
  refused: { typeUnits: number[]; keyUnits: number[]; why: string }[];
  refusedEvents: { type: string; key: string; sessionId?: string; why: string }[];
}
const vectors = JSON.parse(
  readFileSync(new URL("../fixtures/message-id-vectors.json", import.meta.url), "utf8"),
) as Vectors;

describe("MessageId fixed vectors (test/fixtures/message-id-vectors.json, shared by every publisher)", function () {
  it("the namespace is sbinbox's", function () {
    assert.equal(vectors.namespace, MESSAGE_ID_NAMESPACE);
  });

  for (const { type, key, messageId } of vectors.derived) {
    it(`${type}:${key.length > 20 ? `${key.slice(0, 8)}... (${key.length} chars)` : JSON.stringify(key)}`, function () {
      assert.equal(deriveMessageId(type, key), messageId);
    });
  }

  it("uuidV5 in another namespace (RFC 9562's own example)", function () {
    for (const { namespace, name, id } of vectors.uuidV5) assert.equal(uuidV5(name, namespace), id);
  });

  it("retry and replay copies", function () {
    for (const r of vectors.retry) assert.equal(retryMessageId(r.inboxKey, r.replay, r.attempt), r.messageId);
    for (const r of vectors.replay) assert.equal(replayMessageId(r.inboxKey, r.replay), r.messageId);
  });

  it("refused names (empty, a colon in the type, a lone surrogate) are never given an id", function () {
    assert.ok(vectors.refused.length >= 5);
    for (const { typeUnits, keyUnits, why } of vectors.refused)
      assert.throws(
        () => deriveMessageId(String.fromCharCode(...typeUnits), String.fromCharCode(...keyUnits)),
        TypeError,
        why,
      );
  });
});

describe("refused events (test/fixtures/message-id-vectors.json, shared by every publisher)", function () {
  // An enqueue checks every event before it touches the transaction: one that is used fails the test.
  const unused: OutboxTransaction = {
    query: () => Promise.reject(new Error("the transaction was used for a refused event")),
  };

  for (const { type, key, sessionId, why } of vectors.refusedEvents)
    it(why, async function () {
      await assert.rejects(
        enqueue(unused, { type, key, body: {}, ...(sessionId ? { sessionId } : {}) }),
        TypeError,
      );
    });
});

describe("MessageId derivation against the uuid package's v5", function () {
  it("the same id for any well-formed name, short or past the reused buffer, in either namespace", function () {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit: "binary" }),
          fc.string({ unit: "binary", minLength: 1000, maxLength: 1500 }),
        ),
        fc.constantFrom(MESSAGE_ID_NAMESPACE, DNS_NAMESPACE),
        (name, namespace) => {
          assert.equal(uuidV5(name, namespace), uuid.v5(name, namespace));
        },
      ),
      { numRuns: 500 },
    );
  });

  it("deriveMessageId: the same id as uuid's v5 of type:key, names of every length in any order", function () {
    // deriveMessageId has its own path (the namespace written once, one view per name length): names of
    // interleaved lengths reuse those views, and keys past 1024 units take the general path.
    const type = fc.string({ unit: "binary", minLength: 1 }).filter((t) => !t.includes(":"));
    const key = fc.oneof(
      fc.string({ unit: "binary", minLength: 1 }),
      fc.string({ unit: "binary", minLength: 1000, maxLength: 1500 }),
    );
    fc.assert(
      fc.property(type, key, (t, k) => {
        assert.equal(deriveMessageId(t, k), uuid.v5(`${t}:${k}`, MESSAGE_ID_NAMESPACE));
      }),
      { numRuns: 1000 },
    );
  });

  it("a name given as bytes", function () {
    const bytes = new Uint8Array([0, 0xff, 0x80, 0x41]);
    assert.equal(uuidV5(bytes, MESSAGE_ID_NAMESPACE), uuid.v5(bytes, MESSAGE_ID_NAMESPACE));
  });

  it("a lone surrogate is refused with the part named", function () {
    assert.throws(() => deriveMessageId("T", "lone\uD800"), /business key has a lone surrogate/);
    assert.throws(() => deriveMessageId("\uDC00T", "1"), /event type has a lone surrogate/);
    assert.throws(() => retryMessageId("T:\uD800", 0, 1), /lone surrogate/);
  });
});
