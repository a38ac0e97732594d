import { MalformedMessageError, messageIdKey, parseMessage, setMessageId } from "./codec.ts";
import { newLockToken, tokenFromWire } from "./lock-token.ts";
import type { Queue, Settlement } from "./queue.ts";
import { amqp } from "./rhea.ts";
import { ruleOperation } from "./rule-management.ts";
import { sessionLockLostResponse, sessionOperation } from "./session-link.ts";
import { NO_SESSION_ID_SEND, sessionIdOfParts } from "./sessions.ts";
import { Topic } from "./topic.ts";
import type { ManagementResponse } from "./management-response.ts";
import { encodeStored, longArray, timestampArray, toSequenceNumber, uuidOf } from "./wire.ts";

export type { ManagementResponse } from "./management-response.ts";

const lockLost: ManagementResponse = {
  status: 410,
  condition: "com.microsoft:message-lock-lost",
  description:
    "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.",
};

function bad(description: string): ManagementResponse {
  return { status: 400, condition: "amqp:invalid-field", description };
}

type Body = Record<string, unknown>;

function list(value: unknown): unknown[] | undefined {
  return Array.isArray(value) ? value : undefined;
}

function sequenceNumbers(body: Body): number[] | undefined {
  const raw = list(body["sequence-numbers"]);
  if (!raw) return undefined;
  const seqs = raw.map(toSequenceNumber);
  return seqs.every((s) => s !== undefined) ? seqs : undefined;
}

function lockTokens(body: Body): string[] | undefined {
  const raw = list(body["lock-tokens"]);
  if (!raw) return undefined;
  const tokens = raw.map(tokenFromWire);
  return tokens.every((t) => t !== undefined) ? tokens : undefined;
}

/** What scheduling needs of an entity: a queue, or a topic (whose subscriptions get the message when due). */
type Schedulable = Pick<Queue, "quotaExceeded" | "schedule" | "cancelScheduled"> & {
  settings: { maxMessageSizeBytes: number };
};

/**
 * Handles one `$management` operation against a queue, a subscription or a topic; unknown operations get an AMQP
 * error, never a crash. A topic takes only scheduling, as on Service Bus: locks, peeks and deferred messages are
 * its subscriptions'.
 */
export function handleManagement(
  entity: Queue | Topic,
  operation: unknown,
  rawBody: unknown,
): ManagementResponse {
  const body: Body =
    typeof rawBody === "object" && rawBody !== null && !Array.isArray(rawBody) ? (rawBody as Body) : {};
  if (operation === "com.microsoft:schedule-message") return schedule(entity, body);
  if (operation === "com.microsoft:cancel-scheduled-message") {
    const seqs = sequenceNumbers(body);
    if (!seqs) return bad("sequence-numbers must be an array of longs");
    entity.cancelScheduled(seqs);
    return { status: 200, body: {} };
  }
  if (entity instanceof Topic)
    return {
      status: 400,
      condition: "amqp:not-allowed",
      description: `The operation ${String(operation)} is not allowed on topic '${entity.name}'; use one of its subscriptions.`,
    };
  return queueOperation(entity, operation, body);
}

function queueOperation(queue: Queue, operation: unknown, body: Body): ManagementResponse {
  switch (operation) {
    case "com.microsoft:renew-lock": {
      const tokens = lockTokens(body);
      if (!tokens) return bad("lock-tokens must be an array of uuids");
      const expirations: number[] = [];
      for (const token of tokens) {
        const until = queue.renewLock(token);
        if (until === undefined) return lockLost;
        expirations.push(until);
      }
      return { status: 200, body: { expirations: timestampArray(expirations) } };
    }
    case "com.microsoft:peek-message": {
      const from = toSequenceNumber(body["from-sequence-number"]);
      const count = body["message-count"];
      if (from === undefined || typeof count !== "number" || count < 1)
        return bad("from-sequence-number and message-count are required");
      const messages = queue.peek(from, count, sessionIdIn(body));
      if (messages.length === 0) return { status: 204, description: "No messages to peek" };
      return {
        status: 200,
        body: { messages: messages.map((m) => ({ message: encodeStored(m, undefined) })) },
      };
    }
    case "com.microsoft:update-disposition": {
      const tokens = lockTokens(body);
      if (!tokens) return bad("lock-tokens must be an array of uuids");
      const properties = body["properties-to-modify"];
      const props = typeof properties === "object" && properties !== null ? (properties as Body) : undefined;
      let settlement: Settlement;
      switch (body["disposition-status"]) {
        case "completed":
          settlement = { kind: "complete" };
          break;
        case "abandoned":
          settlement = { kind: "abandon", properties: props };
          break;
        case "defered":
        case "deferred":
          settlement = { kind: "defer", properties: props };
          break;
        case "suspended":
          settlement = {
            kind: "deadLetter",
            reason: typeof body["deadletter-reason"] === "string" ? body["deadletter-reason"] : undefined,
            description:
              typeof body["deadletter-description"] === "string" ? body["deadletter-description"] : undefined,
            properties: props,
          };
          break;
        default:
          return bad(`unknown disposition-status ${String(body["disposition-status"])}`);
      }
      for (const token of tokens) if (queue.settle(token, settlement) === "lockLost") return lockLost;
      return { status: 200, body: {} };
    }
    case "com.microsoft:batch-delete-messages":
      return batchDelete(queue, body);
    case "com.microsoft:receive-by-sequence-number": {
      const seqs = sequenceNumbers(body);
      if (!seqs) return bad("sequence-numbers must be an array of longs");
      const receiveAndDelete = body["receiver-settle-mode"] === 0;
      const sessionId = sessionIdIn(body);
      if (queue.sessions && (sessionId === undefined || !queue.sessions.lockedSession(sessionId)))
        return sessionLockLostResponse(sessionId ?? "");
      const received = queue.receiveDeferred(seqs, receiveAndDelete, sessionId);
      if (!received)
        return {
          status: 404,
          condition: "com.microsoft:message-not-found",
          description:
            "Failed to lock one or more specified messages. Either the message is not deferred or it does not exist.",
        };
      return {
        status: 200,
        body: {
          messages: received.map(({ message, token }) => {
            const entry: Body = { message: encodeStored(message, token) };
            if (token !== undefined) entry["lock-token"] = uuidOf(token);
            return entry;
          }),
        },
      };
    }
    default:
      return (
        sessionOperation(queue, operation, body) ??
        ruleOperation(queue, operation, body) ?? {
          status: 501,
          condition: "amqp:not-implemented",
          description: `The operation ${String(operation)} is not supported by the local broker.`,
        }
      );
  }
}

/**
 * The most messages one batch delete may name on Standard tier (learn.microsoft.com, "Batch delete messages in
 * Azure Service Bus", Quotas: Standard 500, Premium 4000); the local broker follows Standard, as its other defaults.
 */
export const BATCH_DELETE_MAX = 500;

function batchDelete(queue: Queue, body: Body): ManagementResponse {
  const count = body["message-count"];
  if (typeof count !== "number" || !Number.isInteger(count) || count < 1 || count > BATCH_DELETE_MAX)
    return {
      status: 400,
      condition: "com.microsoft:argument-out-of-range",
      description: `message-count must be a whole number from 1 to ${BATCH_DELETE_MAX} (the Standard tier's most per request), got ${String(count)}`,
    };
  const cutoff = body["enqueued-time-utc"];
  const before = cutoff instanceof Date ? cutoff.getTime() : typeof cutoff === "number" ? cutoff : undefined;
  const deleted = queue.deleteBatch(count, before, sessionIdIn(body));
  if (deleted === 0) return { status: 204, description: "No messages to delete" };
  return { status: 200, body: { "message-count": amqp.types.wrap_int(deleted) } };
}

function sessionIdIn(body: Body): string | undefined {
  const id = body["session-id"];
  return typeof id === "string" ? id : undefined;
}

function schedule(entity: Schedulable, body: Body): ManagementResponse {
  const entries = list(body["messages"]);
  if (!entries) return bad("messages must be a list");
  const incoming = entries.reduce<number>((sum, e) => {
    const raw = (e as Body | undefined)?.["message"];
    return sum + (Buffer.isBuffer(raw) ? raw.length : 0);
  }, 0);
  const full = entity.quotaExceeded(incoming);
  if (full !== undefined)
    return { status: 403, condition: "amqp:resource-limit-exceeded", description: full };
  const seqs: number[] = [];
  for (const entry of entries) {
    const raw = (entry as Body | undefined)?.["message"];
    if (!Buffer.isBuffer(raw)) return bad("each scheduled entry needs an encoded message");
    if (raw.length > entity.settings.maxMessageSizeBytes)
      return {
        status: 403,
        condition: "amqp:link:message-size-exceeded",
        description: `The message size ${raw.length} exceeds the limit ${entity.settings.maxMessageSizeBytes} bytes.`,
      };
    let parts;
    try {
      parts = parseMessage(raw);
    } catch (error) {
      if (error instanceof MalformedMessageError) return bad(error.message);
      throw error;
    }
    if ("sessions" in entity && entity.sessions && sessionIdOfParts(parts) === undefined)
      return { status: 400, condition: "amqp:not-allowed", description: NO_SESSION_ID_SEND };
    let key = messageIdKey(parts.head.message_id);
    if (key === undefined) {
      key = newLockToken().replace(/-/g, "");
      setMessageId(parts, key);
    }
    seqs.push(entity.schedule(parts, key));
  }
  return { status: 200, body: { "sequence-numbers": longArray(seqs) } };
}
