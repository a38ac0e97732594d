/**
 * The inbox stores a MessageId as a key of bytes, one to one with the string (docs/inbox.md, "The marker"):
 *
 * - a canonical lowercase UUID (what the publisher's name-based ids and crypto.randomUUID give) is its 16 bytes;
 * - any other well-formed string is its UTF-8 bytes and 0xFF, or 0xFF 0xFF when that would make 16 bytes;
 * - a string with a lone surrogate (no UTF-8 form) is 0xFE and its UTF-16LE code units.
 *
 * UTF-8 never holds 0xFE or 0xFF, so no text key is 16 bytes long, ends like another or starts like the third
 * kind; the third kind has an odd length. So two MessageIds share a key only when they are the same string, and a
 * uppercase UUID or one in braces is a string like any other, compared exactly as before.
 */
const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const UUID_BYTES = 16;
const TEXT_END = 0xff;
const UTF16_START = 0xfe;

export function messageKey(messageId: string): Buffer {
  if (CANONICAL_UUID.test(messageId)) return Buffer.from(messageId.replaceAll("-", ""), "hex");
  if (LONE_SURROGATE.test(messageId)) {
    const units = Buffer.from(messageId, "utf16le");
    return Buffer.concat([Buffer.of(UTF16_START), units]);
  }
  const text = Buffer.from(messageId, "utf8");
  const end = text.length + 1 === UUID_BYTES ? [TEXT_END, TEXT_END] : [TEXT_END];
  return Buffer.concat([text, Buffer.from(end)]);
}

/** The MessageId a key was made from: for reading markers back (tools, tests, the docs' queries). */
export function messageIdOfKey(key: Uint8Array): string {
  const bytes = Buffer.from(key.buffer, key.byteOffset, key.byteLength);
  if (bytes.length === UUID_BYTES) {
    const hex = bytes.toString("hex");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
  if (bytes[0] === UTF16_START) return bytes.subarray(1).toString("utf16le");
  let end = bytes.length;
  while (end > 0 && bytes[end - 1] === TEXT_END) end -= 1;
  return bytes.subarray(0, end).toString("utf8");
}

/** Keys as text, for a Map or Set: Buffers compare by identity. */
export function keyText(key: Uint8Array): string {
  return Buffer.from(key.buffer, key.byteOffset, key.byteLength).toString("hex");
}
