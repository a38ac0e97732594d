import { encodeForDelivery } from "./codec.ts";
import { tokenToBytes } from "./lock-token.ts";
import type { StoredMessage } from "./queue.ts";
import { amqp } from "./rhea.ts";

/** The broker's annotations on a message it hands out; the SDKs read these names (see the AMQP notes). */
export function encodeStored(message: StoredMessage, lockToken: string | undefined): Buffer {
  const annotations: Record<string, unknown> = {
    "x-opt-sequence-number": amqp.types.wrap_long(message.seq),
    "x-opt-enqueued-time": new Date(message.enqueuedAt),
  };
  if (lockToken !== undefined) annotations["x-opt-locked-until"] = new Date(message.lockedUntil);
  if (message.state === "deferred" || message.wasDeferred)
    annotations["x-opt-message-state"] = amqp.types.wrap_int(1);
  else if (message.state === "scheduled") annotations["x-opt-message-state"] = amqp.types.wrap_int(2);
  if (message.deadLetterSource !== undefined)
    annotations["x-opt-deadletter-source"] = message.deadLetterSource;
  return encodeForDelivery(message.parts, message.deliveryCount, annotations);
}

/** Sequence numbers arrive as AMQP longs: numbers, or 8-byte buffers when rhea keeps them raw. */
export function toSequenceNumber(value: unknown): number | undefined {
  if (typeof value === "number" && Number.isInteger(value)) return value;
  if (typeof value === "bigint") return Number(value);
  if (Buffer.isBuffer(value) && value.length === 8) return Number(value.readBigInt64BE(0));
  return undefined;
}

export function longArray(values: number[]): unknown {
  return amqp.types.wrap_array(
    values.map((v) => {
      const b = Buffer.alloc(8);
      b.writeBigInt64BE(BigInt(v));
      return b;
    }),
    0x81,
    undefined,
  );
}

export function timestampArray(values: number[]): unknown {
  return amqp.types.wrap_array(values, 0x83, undefined);
}

export function uuidOf(token: string): unknown {
  return amqp.types.wrap_uuid(tokenToBytes(token));
}
