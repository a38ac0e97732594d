import assert from "node:assert/strict";
import fc from "fast-check";
import {
  DNS_NAMESPACE,
  MESSAGE_ID_NAMESPACE,
  canonicalName,
  deriveMessageId,
  uuidV5,
} from "../../src/servicebus/message-id.ts";

describe("MessageId derivation (UUID v5, RFC 9562)", function () {
  it("matches the RFC 9562 example and well-known v5 vectors", function () {
    // RFC 9562 appendix A.4: v5 of "www.example.com" in the DNS namespace.
    assert.equal(uuidV5("www.example.com", DNS_NAMESPACE), "2ed6657d-e927-568b-95e1-2665a8aea6a2");
    // Python: uuid.uuid5(uuid.NAMESPACE_DNS, "python.org")
    assert.equal(uuidV5("python.org", DNS_NAMESPACE), "886313e1-3b8a-5372-9b90-0c9aee199e5d");
  });

  it("the README's test vectors for the sbinbox namespace", function () {
    assert.equal(MESSAGE_ID_NAMESPACE, "f5dfdc27-9e31-4822-becc-050e35acb0fa");
    assert.equal(deriveMessageId("AccountCredited", "42"), "a2668bf9-a521-5762-bb23-32b8fb55257a");
    assert.equal(
      deriveMessageId("AccountCredited", "acc-7/2024-01-01"),
      "fc662236-b18e-559b-ba90-58df80e94f80",
    );
    assert.equal(deriveMessageId("NoteCreated", "42"), "bdc4ce33-cf0f-55d8-b0c5-f199e0f5c8eb");
    assert.equal(deriveMessageId("AccountCredited", "ключ"), "a8eab3f1-3369-52e4-a6f2-008ee0a930be");
    assert.equal(
      uuidV5("AccountCredited:42", MESSAGE_ID_NAMESPACE),
      deriveMessageId("AccountCredited", "42"),
    );
  });

  it("is a version 5, RFC-variant UUID, stable, and distinct for distinct names", function () {
    fc.assert(
      fc.property(fc.string({ minLength: 1 }), fc.string({ minLength: 1 }), (key, other) => {
        const id = deriveMessageId("T", key);
        assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
        assert.equal(deriveMessageId("T", key), id);
        if (other !== key) assert.notEqual(deriveMessageId("T", other), id);
      }),
    );
  });

  it("the type may not contain the separator; the key may", function () {
    assert.throws(() => canonicalName("A:B", "1"), /must not contain ":"/);
    assert.throws(() => canonicalName("", "1"), /empty/);
    assert.throws(() => canonicalName("A", ""), /empty/);
    assert.equal(canonicalName("A", "b:c"), "A:b:c");
  });
});

describe("uuidV5 input checks", function () {
  it("refuses a namespace that is not a UUID, naming it", function () {
    assert.throws(() => uuidV5("x", "not-a-uuid"), /namespace "not-a-uuid" is not a UUID/);
  });

  it("a name given as bytes derives the same id as the same name as a string", function () {
    assert.equal(
      uuidV5(new TextEncoder().encode("www.example.com"), DNS_NAMESPACE),
      "2ed6657d-e927-568b-95e1-2665a8aea6a2",
    );
  });
});
