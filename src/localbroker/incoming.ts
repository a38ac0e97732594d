import {
  isBatchFormat,
  MalformedMessageError,
  messageIdKey,
  parseMessage,
  setMessageId,
  unpackBatch,
  type MessageParts,
} from "./codec.ts";
import { accepted, rejected } from "./consumer.ts";
import { newLockToken } from "./lock-token.ts";
import type { Delivery } from "./rhea.ts";
import type { Queue } from "./queue.ts";
import { NO_SESSION_ID_SEND, sessionIdOfParts } from "./sessions.ts";
import { SERVER_BUSY, SERVER_BUSY_DESCRIPTION } from "./throttle.ts";
import type { Topic } from "./topic.ts";

/** A queue, a subscription (a Queue of its own), a dead-letter subqueue, or a topic. */
export type Entity = Queue | Topic;

/**
 * A transfer on a sending link: refused whole (past the link's size `limit`, past the entity's size, not decodable,
 * a message without a session id on a session entity, throttled by `admit`, one credit a message), or each of its messages stored, a missing MessageId given
 * one first, and the delivery accepted.
 */
export function acceptSend(
  queue: Entity,
  data: Buffer,
  format: number | undefined,
  delivery: Delivery,
  limit: number,
  admit: (messages: number) => boolean = () => true,
): void {
  if (data.length > limit) {
    delivery.update(
      true,
      rejected(
        "amqp:link:message-size-exceeded",
        `The received message (delivery-id:${delivery.id}, size:${data.length} bytes) exceeds the limit (${limit} bytes) currently allowed on the link.`,
      ),
    );
    return;
  }
  const full = queue.quotaExceeded(data.length);
  if (full !== undefined) {
    delivery.update(true, rejected("amqp:resource-limit-exceeded", full));
    return;
  }
  let messages: MessageParts[];
  try {
    const raws = isBatchFormat(format) ? unpackBatch(data) : [data];
    messages = raws.map(parseMessage);
  } catch (error) {
    if (!(error instanceof MalformedMessageError)) throw error;
    delivery.update(true, rejected("amqp:decode-error", error.message));
    return;
  }
  if ("sessions" in queue && queue.sessions && messages.some((m) => sessionIdOfParts(m) === undefined)) {
    delivery.update(true, rejected("amqp:not-allowed", NO_SESSION_ID_SEND));
    return;
  }
  if (!admit(messages.length)) {
    delivery.update(true, rejected(SERVER_BUSY, SERVER_BUSY_DESCRIPTION));
    return;
  }
  for (const parts of messages) {
    let key = messageIdKey(parts.head.message_id);
    if (key === undefined) {
      key = newLockToken().replace(/-/g, "");
      setMessageId(parts, key);
    }
    queue.send(parts, key);
  }
  delivery.update(true, accepted());
}
