/**
 * The inbox stores a MessageId as a key of bytes, one to one with the string (docs/inbox.md, "The marker"):
 *
 * - a canonical lowercase UUID (what the publisher's name-based ids and crypto.randomUUID give) is its 16 bytes;
 * - any other well-formed string is its UTF-8 bytes and 0xFF padding: at least one, up to 17 bytes in all;
 * - a string with a lone surrogate (no UTF-8 form) is 0xFE, its count of UTF-16 code units (one byte, at most
 *   128), those units as UTF-16LE, and the same 0xFF padding.
 *
 * SQL Server compares varbinary ignoring trailing 0x00 bytes (0x41 = 0x4100), so keys must stay distinct under
 * that comparison too, not only byte for byte: a UUID key is exactly 16 bytes, and every other key is at least 17
 * and ends in 0xFF, so no key is another with zeros appended. UTF-8 never holds 0xFE or 0xFF, so a text key ends
 * where its 0xFF padding starts and never starts like the third kind, whose count says where its units end.
 * So two MessageIds share a key only when they are the same string, on either database; a uppercase UUID or one
 * in braces is a string like any other, compared exactly as before.
 */
const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const UUID_BYTES = 16;
const OTHER_MIN_BYTES = UUID_BYTES + 1;
const PAD = 0xff;
const UTF16_START = 0xfe;
const MAX_UTF16_UNITS = 255;

export function messageKey(messageId: string): Buffer {
  if (CANONICAL_UUID.test(messageId)) return Buffer.from(messageId.replaceAll("-", ""), "hex");
  if (LONE_SURROGATE.test(messageId)) return padded(utf16Key(messageId));
  return padded(Buffer.from(messageId, "utf8"));
}

function utf16Key(messageId: string): Buffer {
  // One byte holds the count; Service Bus caps a MessageId at 128 characters, so this only guards the encoding.
  if (messageId.length > MAX_UTF16_UNITS)
    throw new RangeError(
      `MessageId of ${messageId.length} UTF-16 units: at most ${MAX_UTF16_UNITS} are accepted`,
    );
  return Buffer.concat([Buffer.of(UTF16_START, messageId.length), Buffer.from(messageId, "utf16le")]);
}

/** At least one 0xFF, so the key never ends in 0x00, and at least 17 bytes, so it is never a UUID's length. */
function padded(body: Buffer): Buffer {
  const pad = Math.max(1, OTHER_MIN_BYTES - body.length);
  return Buffer.concat([body, Buffer.alloc(pad, PAD)]);
}

/** The MessageId a key was made from: for reading markers back (tools, tests, the docs' queries). */
export function messageIdOfKey(key: Uint8Array): string {
  const bytes = Buffer.from(key.buffer, key.byteOffset, key.byteLength);
  if (bytes.length === UUID_BYTES) {
    const hex = bytes.toString("hex");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
  if (bytes[0] === UTF16_START) return bytes.subarray(2, 2 + 2 * (bytes[1] ?? 0)).toString("utf16le");
  let end = bytes.length;
  while (end > 0 && bytes[end - 1] === PAD) end -= 1;
  return bytes.subarray(0, end).toString("utf8");
}

/** Keys as text, for a Map or Set: Buffers compare by identity. */
export function keyText(key: Uint8Array): string {
  return Buffer.from(key.buffer, key.byteOffset, key.byteLength).toString("hex");
}
