import type { ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiver } from "@azure/service-bus";
import Long from "long";
import { CopyProperty, retryState } from "../domain/envelope.ts";
import { Attr } from "../telemetry/names.ts";
import { copyOf } from "./copy.ts";
import { createEntityReceiver } from "./entity-receiver.ts";
import { refuseSubscription } from "../domain/entity.ts";
import { replayMessageId } from "./message-id.ts";
import { toIncoming } from "./incoming.ts";
import { endSpan, injectTraceContext, startSendSpan } from "./tracing.ts";

/** One dead-lettered message as `sbinbox dlq` shows it. */
export interface DeadLetter {
  readonly messageId: string;
  readonly sequenceNumber: string;
  readonly reason?: string;
  readonly description?: string;
  readonly enqueuedTime?: Date;
  readonly deliveryCount: number;
  /** The inbox key its copies are deduplicated by: the original MessageId. */
  readonly inboxKey: string;
  /** How many times it was replayed already. */
  readonly replay: number;
  readonly subject?: string;
  /** The body as text, only when asked for. */
  readonly body?: string;
}

export type Selector = (message: DeadLetter) => boolean;

const PAGE = 100;

/** Reads the dead-letter queue without locking anything (peek), oldest first, up to `max` messages. */
export async function peekDeadLetters(
  client: ServiceBusClient,
  queue: string,
  options: { max?: number; bodies?: boolean } = {},
): Promise<DeadLetter[]> {
  const receiver = createEntityReceiver(client, queue, {
    subQueueType: "deadLetter",
    skipParsingBodyAsJson: true,
  });
  const max = options.max ?? Number.MAX_SAFE_INTEGER;
  const out: DeadLetter[] = [];
  try {
    for await (const m of peekAll(receiver, max)) out.push(describe(m, options.bodies === true));
  } finally {
    await receiver.close();
  }
  return out;
}

/** One dead-lettered message with its body, by sequence number: a peek of one from there (undefined when gone). */
export async function peekDeadLetter(
  client: ServiceBusClient,
  queue: string,
  sequenceNumber: string,
): Promise<DeadLetter | undefined> {
  const receiver = createEntityReceiver(client, queue, {
    subQueueType: "deadLetter",
    skipParsingBodyAsJson: true,
  });
  try {
    const [m] = await receiver.peekMessages(1, { fromSequenceNumber: Long.fromString(sequenceNumber) });
    return m && String(m.sequenceNumber) === sequenceNumber ? describe(m, true) : undefined;
  } finally {
    await receiver.close();
  }
}

/**
 * Peeks an entity from its first message, up to `max`. The start is explicit: without one the SDK goes on after the
 * last message peeked on that entity by any receiver of the same client (its management link keeps the cursor), so
 * a second read in a long-lived process (the console) would see nothing.
 */
export async function* peekAll(
  receiver: ServiceBusReceiver,
  max = Number.MAX_SAFE_INTEGER,
): AsyncGenerator<ServiceBusReceivedMessage> {
  let from = Long.ONE;
  let n = 0;
  while (n < max) {
    const page = await receiver.peekMessages(Math.min(PAGE, max - n), { fromSequenceNumber: from });
    if (page.length === 0) return;
    for (const m of page) {
      if (n++ >= max) return;
      yield m;
    }
    from = Long.fromValue(page[page.length - 1]!.sequenceNumber!).add(1);
  }
}

export interface DrainOptions {
  /** Called after each message acted on, with the count so far and that message. */
  readonly onProgress?: (done: number, message: DeadLetter) => void;
  /** Stop after this many acted on. */
  readonly max?: number;
}

export interface ReplayOptions extends DrainOptions {
  /** Runs after a copy is sent and before its dead-lettered original is completed (fault injection; tests). */
  readonly beforeComplete?: (messageId: string) => void | Promise<void>;
}

export interface ReplayResult {
  /** Each replayed message: its MessageId and the copy's. */
  readonly replayed: { messageId: string; copyMessageId: string }[];
}

/**
 * Replays the selected dead-lettered messages to the queue. Each copy gets a MessageId derived from the original
 * inbox key and the next replay number, so it passes duplicate detection (the original's id may still be in the
 * window) and a re-run after a crash sends the same id again, which the broker drops. It carries the original
 * inbox key, so a message whose effect had in fact committed comes back as `duplicate`. The dead-lettered message
 * is completed only after its copy is sent: a command that dies half-way loses nothing.
 */
export async function replayDeadLetters(
  client: ServiceBusClient,
  queue: string,
  select: Selector,
  options: ReplayOptions = {},
): Promise<ReplayResult> {
  // A replay is a send to the queue; a subscription cannot be sent to, and where it forwards is not readable here.
  refuseSubscription(queue, "sbinbox dlq replay");
  const sender = client.createSender(queue);
  const replayed: ReplayResult["replayed"] = [];
  try {
    await drain(client, queue, select, options, async (receiver, message, info) => {
      const replay = info.replay + 1;
      const copyId = replayMessageId(info.inboxKey, replay);
      const properties: Record<string, string | number> = {
        [CopyProperty.originalKey]: info.inboxKey,
        [CopyProperty.attempt]: 1,
        [CopyProperty.replay]: replay,
      };
      const copy = copyOf(message, copyId, properties);
      // The replay is a send of its own: a PRODUCER span whose context the copy carries to the worker.
      const { span, ctx } = startSendSpan(queue, 1, copyId);
      span.setAttribute(Attr.replayOf, info.messageId);
      injectTraceContext(ctx, copy.applicationProperties as Record<string, unknown>);
      try {
        await sender.sendMessages(copy);
        endSpan(span);
      } catch (error) {
        endSpan(span, error);
        throw error;
      }
      await options.beforeComplete?.(info.messageId);
      await receiver.completeMessage(message);
      replayed.push({ messageId: info.messageId, copyMessageId: copyId });
    });
  } finally {
    await sender.close();
  }
  return { replayed };
}

/** Deletes the selected dead-lettered messages for good; returns their MessageIds. */
export async function purgeDeadLetters(
  client: ServiceBusClient,
  queue: string,
  select: Selector,
  options: DrainOptions = {},
): Promise<string[]> {
  const purged: string[] = [];
  await drain(client, queue, select, options, async (receiver, message, info) => {
    await receiver.completeMessage(message);
    purged.push(info.messageId);
  });
  return purged;
}

/**
 * Acts on the selected dead-lettered messages in passes until one acts on nothing (or `max` is reached): a pass ends
 * when a message comes back (its lock ran out during a long run), so one pass alone can leave selected messages
 * untouched; the next pass, with fresh locks, goes on from there.
 */
async function drain(
  client: ServiceBusClient,
  queue: string,
  select: Selector,
  options: DrainOptions,
  act: (receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage, info: DeadLetter) => Promise<void>,
): Promise<void> {
  const max = options.max ?? Number.MAX_SAFE_INTEGER;
  for (let done = 0; done < max;) {
    const after = await pass(client, queue, select, options, act, done, max);
    if (after === done) return;
    done = after;
  }
}

/**
 * One pass: receives the dead-letter queue under peek-lock and acts on the selected messages. The others stay locked
 * until the end, so they are not received again meanwhile, and are then abandoned back (abandoning in a dead-letter
 * queue does not dead-letter again). A message seen twice (its lock ran out and it came back) ends the pass.
 * Returns the count acted on so far, `done` included.
 */
async function pass(
  client: ServiceBusClient,
  queue: string,
  select: Selector,
  options: DrainOptions,
  act: (receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage, info: DeadLetter) => Promise<void>,
  done: number,
  max: number,
): Promise<number> {
  const receiver = createEntityReceiver(client, queue, {
    subQueueType: "deadLetter",
    receiveMode: "peekLock",
    skipParsingBodyAsJson: true,
  });
  const held: ServiceBusReceivedMessage[] = [];
  const seen = new Set<string>();
  try {
    for (let more = true; more && done < max;) {
      const batch = await receiver.receiveMessages(PAGE, { maxWaitTimeInMs: 2_000 });
      if (batch.length === 0) break;
      for (const message of batch) {
        const seq = String(message.sequenceNumber);
        const info = describe(message, false);
        if (seen.has(seq)) more = false;
        seen.add(seq);
        if (!more || done >= max || !select(info)) {
          held.push(message);
          continue;
        }
        try {
          await act(receiver, message, info);
        } catch (error) {
          // Back to the dead-letter queue at once rather than when its lock runs out, for a re-run to find.
          held.push(message);
          throw error;
        }
        done += 1;
        options.onProgress?.(done, info);
      }
    }
  } finally {
    for (const message of held) {
      try {
        await receiver.abandonMessage(message);
      } catch {
        // Its lock already ran out: it is back in the dead-letter queue either way.
      }
    }
    await receiver.close();
  }
  return done;
}

/** Which of these sequence numbers are still in the dead-letter queue (a peek from the smallest to the largest). */
export async function stillDeadLettered(
  client: ServiceBusClient,
  queue: string,
  sequenceNumbers: readonly string[],
): Promise<Set<string>> {
  const wanted = new Set(sequenceNumbers);
  const found = new Set<string>();
  if (wanted.size === 0) return found;
  const numbers = [...wanted].map((n) => Long.fromString(n));
  const last = numbers.reduce((a, b) => (b.greaterThan(a) ? b : a));
  let from = numbers.reduce((a, b) => (b.lessThan(a) ? b : a));
  const receiver = createEntityReceiver(client, queue, {
    subQueueType: "deadLetter",
    skipParsingBodyAsJson: true,
  });
  try {
    while (!from.greaterThan(last)) {
      const page = await receiver.peekMessages(PAGE, { fromSequenceNumber: from });
      if (page.length === 0) break;
      for (const m of page) if (wanted.has(String(m.sequenceNumber))) found.add(String(m.sequenceNumber));
      from = Long.fromValue(page[page.length - 1]!.sequenceNumber!).add(1);
    }
  } finally {
    await receiver.close();
  }
  return found;
}

function describe(message: ServiceBusReceivedMessage, withBody: boolean): DeadLetter {
  let inboxKey = String(message.messageId ?? "");
  let replay = 0;
  try {
    const state = retryState(toIncoming(message));
    inboxKey = state.inboxKey;
    replay = state.replay;
  } catch {
    // Copy properties of the wrong shape: treat it as an original; the worker will dead-letter it again.
  }
  return {
    messageId: String(message.messageId ?? ""),
    sequenceNumber: String(message.sequenceNumber ?? ""),
    reason: message.deadLetterReason,
    description: message.deadLetterErrorDescription,
    enqueuedTime: message.enqueuedTimeUtc,
    deliveryCount: message.deliveryCount ?? 0,
    inboxKey,
    replay,
    subject: message.subject,
    ...(withBody ? { body: bodyText(message.body) } : {}),
  };
}

function bodyText(body: unknown): string {
  if (Buffer.isBuffer(body)) return body.toString("utf8");
  if (body instanceof Uint8Array) return Buffer.from(body).toString("utf8");
  return typeof body === "string" ? body : JSON.stringify(body);
}
