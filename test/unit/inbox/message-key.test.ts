import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { keyText, messageIdOfKey, messageKey } from "../../../src/inbox/message-key.ts";

describe("the inbox's MessageKey: one to one with the MessageId", function () {
  it("a canonical lowercase UUID is its 16 bytes; anything else is its text, never 16 bytes", function () {
    const id = "0f8fad5b-d9cb-469f-a165-70867728950e";
    assert.equal(messageKey(id).toString("hex"), "0f8fad5bd9cb469fa16570867728950e");
    for (const other of [
      id.toUpperCase(),
      `{${id}}`,
      `${id} `,
      id.replaceAll("-", ""),
      "order-17",
      "",
      "123456789012345", // 15 UTF-8 bytes: 0xFF 0xFF, so 17 and not 16
      "é".repeat(7) + "x", // 15 bytes again, in two-byte characters
      "a\uD800b", // a lone surrogate: no UTF-8 form
    ])
      assert.notEqual(messageKey(other).length, 16, other);
  });

  it("every kind reads back as the string it was made from, and distinct strings give distinct keys", function () {
    const ids = [
      randomUUID(),
      randomUUID().toUpperCase(),
      "order-17",
      "",
      "123456789012345",
      "1234567890123456",
      "é".repeat(7) + "x",
      "a\uD800b",
      "a\uFFFDb", // what a lone surrogate would become in UTF-8: must stay a different key
      "\uDC00",
      "😀".repeat(32),
      "x".repeat(128),
    ];
    const keys = new Set<string>();
    for (const id of ids) {
      const key = messageKey(id);
      assert.equal(messageIdOfKey(key), id);
      keys.add(keyText(key));
    }
    assert.equal(keys.size, ids.length);
  });

  it("fits the columns: 128 characters of three UTF-8 bytes and the suffix are 385 bytes (386 allowed)", function () {
    assert.equal(messageKey("€".repeat(128)).length, 385);
    assert.equal(messageKey("\uD800".repeat(128)).length, 259);
  });

  // SQL Server compares varbinary ignoring trailing zeros: 0x41 = 0x4100. The review's pairs collided that way.
  it("no key is another key with zero bytes appended (SQL Server's varbinary equality)", function () {
    const ids = [
      "AAAAAAAAAAAAAA",
      "41414141-4141-4141-4141-41414141ff00",
      "\uD800aaaaaaa",
      "fe00d861-0061-0061-0061-006100610061",
      "00000000-0000-0000-0000-000000000000",
      "",
      "\uD800",
      "a\u0000",
      "a",
    ];
    const stripped = new Set<string>();
    for (const id of ids) {
      const key = messageKey(id);
      assert.ok(
        key.length === 16 || (key.length >= 17 && key.at(-1) === 0xff),
        `${JSON.stringify(id)}: ${keyText(key)}`,
      );
      stripped.add(keyText(key).replace(/(00)+$/, ""));
    }
    assert.equal(stripped.size, ids.length);
  });
});
