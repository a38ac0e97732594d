import { randomUUID } from "node:crypto";

/** A lock token is a GUID string; these helpers move between its string, its bytes and the wire's delivery tag. */
export function newLockToken(): string {
  return randomUUID();
}

export function tokenToBytes(token: string): Buffer {
  return Buffer.from(token.replace(/-/g, ""), "hex");
}

export function bytesToToken(bytes: Buffer): string {
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Service Bus sends the lock token as the delivery tag in .NET Guid byte order (the first three groups
 * little-endian), and both SDKs reorder it back. The swap is its own inverse.
 */
export function dotnetGuidOrder(bytes: Buffer): Buffer {
  const b = bytes;
  return Buffer.from([b[3]!, b[2]!, b[1]!, b[0]!, b[5]!, b[4]!, b[7]!, b[6]!, ...b.subarray(8, 16)]);
}

export function tokenToDeliveryTag(token: string): Buffer {
  return dotnetGuidOrder(tokenToBytes(token));
}

/** Lock tokens arrive in management requests as AMQP uuids (16-byte buffers) or, from some clients, as strings. */
export function tokenFromWire(value: unknown): string | undefined {
  if (Buffer.isBuffer(value) && value.length === 16) return bytesToToken(value);
  if (typeof value === "string" && /^[0-9a-f-]{36}$/i.test(value)) return value.toLowerCase();
  return undefined;
}
