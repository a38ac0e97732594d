import assert from "node:assert/strict";
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

// MessageIds are persisted identities (inbox keys, the broker's duplicate detection): these were computed with the
// `uuid` package's v5 before the derivation was rewritten, and any implementation must keep producing them.
// The repeated keys put the name (16 namespace bytes + "T:" + key) on both sides of SHA-1's 55- and 119-byte
// padding boundaries.
const derived: [type: string, key: string, id: string][] = [
  ["AccountCredited", "42", "a2668bf9-a521-5762-bb23-32b8fb55257a"],
  ["A", "b", "79ac73b0-2716-5ca9-bd5f-dbb9c7fd55e3"],
  ["NoteCreated", "a:b:c", "7de40ad2-8d6b-5843-a5f6-b8f18878795e"],
  ["AccountCredited", "ключ", "a8eab3f1-3369-52e4-a6f2-008ee0a930be"],
  ["Évènement", "clé-é", "acc47b18-94c8-5637-b7ec-35ae9e1519c1"],
  ["OrderPlaced", "注文-2024", "59734cfb-3dd0-56a7-a972-b7dbf078b082"],
  ["Emoji", "😀🎉", "a86b057e-7490-50c6-9ef1-e8268490f038"],
  ["T", "line\nbreak\ttab", "ecf89574-b6d0-5019-a9bd-483e8ad20602"],
  ["T", "nul\u0000byte", "647f53fe-3ec2-5125-ac6a-a6e4b601a5fd"],
  ["T", "replacement\uFFFD", "5ecd47ec-b1db-52cc-a816-01d30b942df4"],
  ["T", "x".repeat(45), "f37cf294-08eb-5ec5-b4d5-7a9f95af189b"],
  ["T", "x".repeat(46), "73735c88-01f9-54f9-ad88-312822382b3d"],
  ["T", "x".repeat(53), "d679c0a0-5436-55c9-831b-02c7605f8e8a"],
  ["T", "x".repeat(54), "a4efafa0-d5f4-5698-b987-00652f8276a1"],
  ["T", "x".repeat(117), "a1b70717-688f-529e-bc98-1e738c0edb94"],
  ["T", "x".repeat(118), "8825807f-5489-5afa-b6d4-d4bafe63db63"],
  ["T", "y".repeat(1000), "a245140d-466a-5333-8ed1-9a154c636267"],
  ["T", "ю".repeat(300), "1e413417-28e4-5d0b-a401-f493f9c38494"],
];

describe("MessageId fixed vectors (ids computed before the derivation was rewritten)", function () {
  for (const [type, key, id] of derived) {
    it(`${type}:${key.length > 20 ? `${key.slice(0, 8)}... (${key.length} chars)` : JSON.stringify(key)}`, function () {
      assert.equal(deriveMessageId(type, key), id);
    });
  }

  it("retry and replay copies", function () {
    assert.equal(retryMessageId("AccountCredited:42", 0, 1), "d78db867-4fd0-537b-bd49-7e7aa65313cf");
    assert.equal(retryMessageId("Заказ:7", 3, 12), "2ce4c2b5-d3a7-5d36-a363-847b6d98a22d");
    assert.equal(replayMessageId("AccountCredited:42", 0), "e10650d1-6a21-5c64-9459-32751317f7f7");
    assert.equal(replayMessageId("Заказ:7", 5), "0256fcd1-edad-5e01-9d94-501c1f970741");
  });

  it("a key with a lone surrogate (not encodable as UTF-8) is refused, never given an id", function () {
    assert.throws(() => deriveMessageId("T", "lone\uD800"));
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
