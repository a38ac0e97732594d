import { PoisonMessageError } from "./errors.ts";
import type { MessageHandler } from "./handler.ts";
import { checkHandler } from "./handler-module.ts";

/** A received message as the worker sees it, whatever the broker client; built by src/servicebus. */
export interface IncomingMessage {
  readonly messageId: string;
  /** As the client decoded it: bytes (AMQP data), a string, or an already structured AMQP value. */
  readonly body: unknown;
  readonly contentType?: string;
  readonly subject?: string;
  readonly correlationId?: string;
  readonly deliveryCount: number;
  readonly enqueuedTime?: Date;
  /** When this delivery's lock expires unless renewed. */
  readonly lockedUntil?: Date;
  /** The session the message belongs to, on a session-enabled entity. */
  readonly sessionId?: string;
  /** The partition key its sender set, if any. */
  readonly partitionKey?: string;
  readonly applicationProperties: Readonly<Record<string, unknown>>;
}

/** A message that passed decoding and its type's schema. */
export interface DecodedMessage<T = unknown> {
  readonly type: string;
  readonly body: T;
  readonly handler: MessageHandler<T>;
}

/** The application property that names the type when the subject is empty. */
export const TYPE_PROPERTY = "type";

/** Handlers by message type; a type registered twice is a programming error. */
export class HandlerRegistry {
  private readonly byType = new Map<string, MessageHandler>();

  constructor(handlers: readonly MessageHandler[] = []) {
    for (const handler of handlers) this.register(handler);
  }

  register<T>(handler: MessageHandler<T>): this {
    checkHandler(handler);
    if (this.byType.has(handler.type))
      throw new Error(`a handler for "${handler.type}" is already registered`);
    this.byType.set(handler.type, handler);
    return this;
  }

  get(type: string): MessageHandler | undefined {
    return this.byType.get(type);
  }

  get types(): string[] {
    return [...this.byType.keys()];
  }
}

/**
 * Application properties sbinbox writes on a copy it sends (a scheduled retry or a replay from the dead-letter
 * queue). A copy has its own MessageId, so the broker's duplicate detection lets it through; the inbox keys it by
 * the original's key, so the copy and the original can never both take effect.
 */
export const CopyProperty = {
  /** The inbox key (the original MessageId) of the message this is a copy of. */
  originalKey: "sbinbox-original-key",
  /** The attempt this copy is, 1 for the first processing. */
  attempt: "sbinbox-attempt",
  /** How many times an operator replayed it from the dead-letter queue. */
  replay: "sbinbox-replay",
  /** The open two-phase claim the failed attempt held, re-entered by the retry. */
  claimId: "sbinbox-claim-id",
} as const;

/** Where a message stands in its retries; every path reads it here, so every path keys the inbox the same way. */
export interface RetryState {
  /** The inbox key: the original message's MessageId, whichever copy this is. */
  readonly inboxKey: string;
  readonly attempt: number;
  readonly replay: number;
  readonly claimId?: string;
}

/** Reads the retry state; a copy property of the wrong shape is poison (only sbinbox writes them). */
export function retryState(message: IncomingMessage): RetryState {
  const props = message.applicationProperties;
  const original = props[CopyProperty.originalKey];
  if (original !== undefined && (typeof original !== "string" || original === "" || original.length > 128)) {
    throw new PoisonMessageError(
      "UndecodableBody",
      `application property "${CopyProperty.originalKey}" must be a MessageId of 1 to 128 characters`,
    );
  }
  const claim = props[CopyProperty.claimId];
  if (claim !== undefined && (typeof claim !== "string" || !/^\d{1,19}$/.test(claim))) {
    throw new PoisonMessageError(
      "UndecodableBody",
      `application property "${CopyProperty.claimId}" must be an inbox row id`,
    );
  }
  return {
    inboxKey: original ?? message.messageId,
    attempt: counter(props, CopyProperty.attempt, 1),
    replay: counter(props, CopyProperty.replay, 0),
    claimId: claim,
  };
}

function counter(props: Readonly<Record<string, unknown>>, name: string, fallback: number): number {
  const value = props[name];
  if (value === undefined) return fallback;
  const n = typeof value === "string" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isInteger(n) || n < fallback || n > 1_000_000) {
    throw new PoisonMessageError(
      "UndecodableBody",
      `application property "${name}" must be a whole number of at least ${fallback}`,
    );
  }
  return n;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Decodes and validates a message, or throws PoisonMessageError naming what can never succeed:
 * over the size limit, a body that is not JSON, no or an unknown type, a schema violation.
 */
export function decodeMessage(
  message: IncomingMessage,
  registry: HandlerRegistry,
  maxBytes: number,
): DecodedMessage {
  const { text, structured, size } = bodyText(message.body);
  if (size > maxBytes) {
    throw new PoisonMessageError("MessageTooLarge", `body is ${size} bytes, over the limit of ${maxBytes}`);
  }
  const contentType = message.contentType?.split(";")[0]?.trim().toLowerCase();
  if (contentType !== undefined && contentType !== "" && contentType !== "application/json") {
    throw new PoisonMessageError(
      "UndecodableBody",
      `content type "${message.contentType}" is not application/json`,
    );
  }
  let body: unknown = structured;
  if (text !== undefined) {
    try {
      body = JSON.parse(text);
    } catch (error) {
      // The parser's message can quote the body, which may carry personal data and ends up in logs and the
      // dead-letter description: keep only the position.
      const at = /position (\d+)/.exec((error as Error).message)?.[1];
      throw new PoisonMessageError(
        "UndecodableBody",
        `body is not valid JSON${at === undefined ? "" : ` (syntax error at position ${at})`}`,
      );
    }
  }
  const type = messageType(message);
  const handler = registry.get(type);
  if (!handler) {
    throw new PoisonMessageError("UnknownMessageType", `no handler for message type "${type}"`);
  }
  const parsed = handler.schema.safeParse(body);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .slice(0, 3)
      .map((i) => `${i.path.length > 0 ? i.path.join(".") : "(body)"}: ${i.message}`)
      .join("; ");
    throw new PoisonMessageError("SchemaViolation", `${type} does not match its schema: ${issues}`);
  }
  return { type, body: parsed.data, handler };
}

function messageType(message: IncomingMessage): string {
  const subject = message.subject?.trim();
  if (subject) return subject;
  const property = message.applicationProperties[TYPE_PROPERTY];
  if (typeof property === "string" && property.trim() !== "") return property.trim();
  throw new PoisonMessageError(
    "UnknownMessageType",
    `the message names no type: set its subject or the application property "${TYPE_PROPERTY}"`,
  );
}

function bodyText(body: unknown): { text?: string; structured?: unknown; size: number } {
  if (body instanceof Uint8Array) {
    try {
      return { text: utf8.decode(body), size: body.byteLength };
    } catch {
      throw new PoisonMessageError("UndecodableBody", "body is not valid UTF-8");
    }
  }
  if (typeof body === "string") return { text: body, size: Buffer.byteLength(body, "utf8") };
  if (body === undefined || body === null) {
    throw new PoisonMessageError("UndecodableBody", "body is empty");
  }
  // An AMQP value section the client already decoded (a publisher that sent an object, not bytes).
  let size: number;
  try {
    size = Buffer.byteLength(JSON.stringify(body) ?? "", "utf8");
  } catch (error) {
    throw new PoisonMessageError(
      "UndecodableBody",
      `body cannot be represented as JSON: ${(error as Error).message}`,
    );
  }
  return { structured: body, size };
}
