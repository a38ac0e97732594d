import { amqp, type RheaMessage } from "./rhea.ts";

const HEADER = 0x70;
const DELIVERY_ANNOTATIONS = 0x71;
const MESSAGE_ANNOTATIONS = 0x72;
const PROPERTIES = 0x73;
const BATCH_FORMAT = 0x80013700;

const headerFields = ["durable", "priority", "ttl", "first_acquirer"] as const;
const propertyFields = [
  "message_id",
  "user_id",
  "to",
  "subject",
  "reply_to",
  "correlation_id",
  "content_type",
  "content_encoding",
  "absolute_expiry_time",
  "creation_time",
  "group_id",
  "group_sequence",
  "reply_to_group_id",
] as const;

/**
 * A message as the broker keeps it: the header, annotations and properties decoded (the broker reads and
 * rewrites them), everything after them (application properties, body, footer) kept as the sender's bytes,
 * so values round-trip with their AMQP types and delivery does not re-encode the body.
 */
export interface MessageParts {
  head: RheaMessage;
  properties: Buffer;
  tail: Buffer;
  size: number;
}

export class MalformedMessageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MalformedMessageError";
  }
}

function descriptorCode(section: { descriptor?: { value: unknown } }): number | undefined {
  const value = section.descriptor?.value;
  if (typeof value === "number") return value;
  if (typeof value === "string") {
    const symbolic: Record<string, number> = {
      "amqp:header:list": HEADER,
      "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
      "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
      "amqp:properties:list": PROPERTIES,
    };
    return symbolic[value] ?? -1;
  }
  return undefined;
}

/** Splits one encoded message into its sections, decoding only the leading ones. */
export function parseMessage(raw: Buffer): MessageParts {
  try {
    const reader = new amqp.types.Reader(raw);
    let headEnd = 0;
    let propsStart = -1;
    let propsEnd = -1;
    const headSlices: Buffer[] = [];
    while (reader.remaining() > 0) {
      const start = reader.position;
      const code = descriptorCode(reader.read());
      if (code === undefined) throw new MalformedMessageError("message section without a descriptor");
      if (code === HEADER || code === MESSAGE_ANNOTATIONS) {
        headSlices.push(raw.subarray(start, reader.position));
        headEnd = reader.position;
      } else if (code === DELIVERY_ANNOTATIONS) {
        headEnd = reader.position; // delivery annotations are per hop; not kept
      } else if (code === PROPERTIES) {
        propsStart = start;
        propsEnd = reader.position;
        break;
      } else {
        break;
      }
    }
    const properties = propsStart >= 0 ? raw.subarray(propsStart, propsEnd) : Buffer.alloc(0);
    const tail = raw.subarray(propsStart >= 0 ? propsEnd : headEnd);
    const head = amqp.message.decode(Buffer.concat([...headSlices, properties]));
    delete head["body"];
    return { head, properties, tail, size: raw.length };
  } catch (error) {
    if (error instanceof MalformedMessageError) throw error;
    throw new MalformedMessageError(`cannot decode message: ${(error as Error).message}`);
  }
}

/** A batch transfer is an envelope whose Data sections are each an encoded message. */
export function unpackBatch(raw: Buffer): Buffer[] {
  let envelope: RheaMessage;
  try {
    envelope = amqp.message.decode(raw);
  } catch (error) {
    throw new MalformedMessageError(`cannot decode batch envelope: ${(error as Error).message}`);
  }
  const body = envelope.body as { typecode?: number; content?: unknown; multiple?: boolean } | undefined;
  if (!body || body.typecode !== 0x75) throw new MalformedMessageError("batch envelope has no data sections");
  const items = body.multiple ? (body.content as unknown[]) : [body.content];
  return items.map((item) => {
    if (!Buffer.isBuffer(item)) throw new MalformedMessageError("batch data section is not binary");
    return item;
  });
}

export function isBatchFormat(format: number | undefined): boolean {
  return format === BATCH_FORMAT;
}

/** Encodes the given fields and keeps only the sections asked for (rhea always adds a header and a body). */
function encodeSections(fields: RheaMessage, keep: number[]): Buffer {
  const encoded = amqp.message.encode(fields);
  const reader = new amqp.types.Reader(encoded);
  const slices: Buffer[] = [];
  while (reader.remaining() > 0) {
    const start = reader.position;
    const code = descriptorCode(reader.read());
    if (code !== undefined && keep.includes(code)) slices.push(encoded.subarray(start, reader.position));
  }
  return Buffer.concat(slices);
}

/** The bytes sent to a receiver: a fresh header and annotations, then the sender's own properties onward. */
export function encodeForDelivery(
  parts: MessageParts,
  deliveryCount: number,
  annotations: Record<string, unknown>,
): Buffer {
  const fields: RheaMessage = {
    delivery_count: deliveryCount,
    message_annotations: { ...parts.head.message_annotations, ...annotations },
  };
  for (const f of headerFields)
    if (parts.head[f] !== undefined) (fields as Record<string, unknown>)[f] = parts.head[f];
  return Buffer.concat([encodeSections(fields, [HEADER, MESSAGE_ANNOTATIONS]), parts.properties, parts.tail]);
}

export function setMessageId(parts: MessageParts, messageId: string): void {
  parts.head.message_id = messageId;
  const fields: RheaMessage = {};
  for (const f of propertyFields)
    if (parts.head[f] !== undefined) (fields as Record<string, unknown>)[f] = parts.head[f];
  parts.properties = encodeSections(fields, [PROPERTIES]);
}

/**
 * Merges properties into the application properties (abandon's propertiesToModify, dead-letter reasons). This
 * re-encodes the tail, so only the modified messages lose the sender's exact encoding.
 */
export function modifyApplicationProperties(parts: MessageParts, changes: Record<string, unknown>): void {
  if (Object.keys(changes).length === 0) return;
  const tail = parts.tail.length > 0 ? amqp.message.decode(parts.tail) : ({} as RheaMessage);
  const fields: RheaMessage = {
    application_properties: { ...tail.application_properties, ...changes },
    body: tail.body,
  };
  if (tail["footer"] !== undefined) fields["footer"] = tail["footer"];
  parts.tail = encodeSections(fields, [0x74, 0x75, 0x76, 0x77, 0x78]);
}

/** The message id as a string key for duplicate detection, whatever AMQP type the sender used. */
export function messageIdKey(id: unknown): string | undefined {
  if (id === undefined || id === null) return undefined;
  if (Buffer.isBuffer(id)) return `b:${id.toString("hex")}`;
  if (typeof id === "string" || typeof id === "number" || typeof id === "bigint") return String(id);
  return JSON.stringify(id);
}
