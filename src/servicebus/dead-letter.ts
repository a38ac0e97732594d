import type {
  ServiceBusClient,
  ServiceBusReceivedMessage,
  ServiceBusReceiver,
  ServiceBusSender,
} from "@azure/service-bus";
import Long from "long";
import { CopyProperty, retryState, TYPE_PROPERTY } from "../domain/envelope.ts";
import { Attr } from "../telemetry/names.ts";
import { copyOf } from "./copy.ts";
import { actOnDeadLetters, type ActOptions, type NotActed } from "./dead-letter-act.ts";
import { createEntityReceiver } from "./entity-receiver.ts";
import { refuseSubscription } from "../domain/entity.ts";
import { createHash } from "node:crypto";
import { editMessageId, replayMessageId } from "./message-id.ts";
import { toIncoming } from "./incoming.ts";
import { endSpan, injectTraceContext, startSendSpan } from "./tracing.ts";
import { completeWhileBusy, tallied, whileBusy } from "./busy.ts";

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
  /** The message type: its subject, else its `type` application property (as the worker reads it). */
  readonly type?: string;
  /** Deferred: set aside in the dead-letter queue by an earlier action, reached by its sequence number only. */
  readonly state: "active" | "deferred" | "scheduled";
  /** The body as text, only when asked for. */
  readonly body?: string;
  /** Its application properties and headers, with the body. */
  readonly properties?: Record<string, unknown>;
}

export type Selector = (message: DeadLetter) => boolean;

/**
 * How many other dead letters an action with setAside (ActOptions) would defer for good: the active ones before the
 * last selected active one, which the walk in sequence order meets first. The sentence says what that means.
 */
export function setAsideWarning(all: readonly DeadLetter[], selected: ReadonlySet<string>): SetAside {
  let last: Long | undefined;
  for (const m of all)
    if (selected.has(m.sequenceNumber) && m.state === "active") {
      const seq = Long.fromString(m.sequenceNumber);
      if (last === undefined || seq.greaterThan(last)) last = seq;
    }
  const count =
    last === undefined
      ? 0
      : all.filter(
          (m) =>
            m.state === "active" &&
            !selected.has(m.sequenceNumber) &&
            Long.fromString(m.sequenceNumber).lessThan(last),
        ).length;
  return {
    count,
    warning:
      `${count} other dead letters will be set aside (deferred) permanently: only sbinbox or a receive by ` +
      `sequence number can reach them`,
  };
}

export interface SetAside {
  readonly count: number;
  readonly warning: string;
}

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
    const [m] = await whileBusy(receiver, "receive", () =>
      receiver.peekMessages(1, { fromSequenceNumber: Long.fromString(sequenceNumber) }),
    );
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
    const page = await whileBusy(receiver, "receive", () =>
      receiver.peekMessages(Math.min(PAGE, max - n), { fromSequenceNumber: from }),
    );
    if (page.length === 0) return;
    for (const m of page) {
      if (n++ >= max) return;
      yield m;
    }
    from = Long.fromValue(page[page.length - 1]!.sequenceNumber!).add(1);
  }
}

export interface DrainOptions extends ActOptions {
  /** Called after each message acted on, with the count so far and that message. */
  readonly onProgress?: (done: number, message: DeadLetter) => void;
  /** Stop after this many acted on. */
  readonly max?: number;
}

export interface ReplayOptions extends DrainOptions {
  /** Runs before a copy is sent, so before its original is completed: an edit-and-retry archives the original. */
  readonly beforeSend?: (message: ServiceBusReceivedMessage, info: DeadLetter) => Promise<void>;
  /** Runs after a copy is sent and before its dead-lettered original is completed (fault injection; tests). */
  readonly beforeComplete?: (messageId: string) => void | Promise<void>;
  /** A body to send instead of the original's (edit-and-retry), by sequence number; undefined keeps the original. */
  readonly bodyOf?: (sequenceNumber: string) => Buffer | undefined;
  /** Called after each message replayed (its copy sent, the original completed), with the copy's MessageId. */
  readonly onReplayed?: (message: DeadLetter, copyMessageId: string) => void;
}

/** The selected messages not acted on: why each was not (by sequence number), and those a stop left unstarted. */
export interface DrainResult {
  readonly notActed: ReadonlyMap<string, NotActed>;
  readonly stopped: readonly string[];
}

export interface ReplayResult extends DrainResult {
  /** Each replayed message: its MessageId and the copy's. */
  readonly replayed: { messageId: string; copyMessageId: string; sequenceNumber: string }[];
}

/** What to act on: a selector over a fresh peek, or exactly these sequence numbers (what an operator confirmed). */
export type Target = Selector | readonly string[];

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
  target: Target,
  options: ReplayOptions = {},
): Promise<ReplayResult> {
  // A replay is a send to the queue; a subscription cannot be sent to, and where it forwards is not readable here.
  refuseSubscription(queue, "sbinbox dlq replay");
  const sender = tallied(client, client.createSender(queue));
  const replayed: ReplayResult["replayed"] = [];
  try {
    const result = await drain(client, queue, target, options, async (receiver, message, info) => {
      await options.beforeSend?.(message, info);
      const copyId = await sendReplay(sender, queue, message, info, options.bodyOf?.(info.sequenceNumber));
      await options.beforeComplete?.(info.messageId);
      await completeWhileBusy(receiver, message);
      replayed.push({
        messageId: info.messageId,
        copyMessageId: copyId,
        sequenceNumber: info.sequenceNumber,
      });
      options.onReplayed?.(info, copyId);
    });
    return { ...result, replayed };
  } finally {
    await sender.close();
  }
}

/** Sends the replay copy of a dead letter; returns the copy's MessageId. */
export async function sendReplay(
  sender: ServiceBusSender,
  queue: string,
  message: ServiceBusReceivedMessage,
  info: DeadLetter,
  body?: Buffer,
): Promise<string> {
  const replay = info.replay + 1;
  // An edit's copy has an id of its own (editMessageId): a replay of the same dead letter may have sent this one.
  const copyId =
    body === undefined
      ? replayMessageId(info.inboxKey, replay)
      : editMessageId(info.inboxKey, replay, createHash("sha256").update(body).digest("hex"));
  const properties: Record<string, string | number> = {
    [CopyProperty.originalKey]: info.inboxKey,
    [CopyProperty.attempt]: 1,
    [CopyProperty.replay]: replay,
  };
  const copy = copyOf(message, copyId, properties);
  if (body !== undefined) copy.body = body;
  // The replay is a send of its own: a PRODUCER span whose context the copy carries to the worker.
  const { span, ctx } = startSendSpan(queue, 1, copyId);
  span.setAttribute(Attr.replayOf, info.messageId);
  injectTraceContext(ctx, copy.applicationProperties as Record<string, unknown>);
  try {
    // A ServerBusy send stored nothing; a resend of a try whose answer was lost is dropped by its stable MessageId.
    await whileBusy(sender, "send", (abortSignal) => sender.sendMessages(copy, { abortSignal }));
    endSpan(span);
  } catch (error) {
    endSpan(span, error);
    throw error;
  }
  return copyId;
}

/** Deletes the selected dead-lettered messages for good; `beforeComplete` sees each first (the archive). */
export async function purgeDeadLetters(
  client: ServiceBusClient,
  queue: string,
  target: Target,
  options: DrainOptions & {
    readonly beforeComplete?: (message: ServiceBusReceivedMessage, info: DeadLetter) => Promise<void>;
  } = {},
): Promise<DrainResult & { purged: string[] }> {
  const purged: string[] = [];
  const result = await drain(client, queue, target, options, async (receiver, message, info) => {
    await options.beforeComplete?.(message, info);
    await completeWhileBusy(receiver, message);
    purged.push(info.messageId);
  });
  return { ...result, purged };
}

/**
 * Acts on exactly the targeted dead letters (actOnDeadLetters: the others passed abandoned, or deferred with
 * setAside); a selector is resolved against a peek of the whole dead-letter queue first.
 */
async function drain(
  client: ServiceBusClient,
  queue: string,
  target: Target,
  options: DrainOptions,
  act: (receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage, info: DeadLetter) => Promise<void>,
): Promise<DrainResult> {
  const all =
    typeof target === "function"
      ? (await peekDeadLetters(client, queue)).filter(target).map((m) => m.sequenceNumber)
      : [...target];
  const sequenceNumbers = all.slice(0, options.max ?? all.length);
  let done = 0;
  const outcome = await actOnDeadLetters(
    client,
    queue,
    sequenceNumbers,
    async (receiver, message) => {
      const info = describe(message, false);
      await act(receiver, message, info);
      options.onProgress?.(++done, info);
    },
    options,
  );
  return { notActed: outcome.notActed, stopped: outcome.stopped };
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
      const page = await whileBusy(receiver, "receive", () =>
        receiver.peekMessages(PAGE, { fromSequenceNumber: from }),
      );
      if (page.length === 0) break;
      for (const m of page) if (wanted.has(String(m.sequenceNumber))) found.add(String(m.sequenceNumber));
      from = Long.fromValue(page[page.length - 1]!.sequenceNumber!).add(1);
    }
  } finally {
    await receiver.close();
  }
  return found;
}

export function describe(message: ServiceBusReceivedMessage, withBody: boolean): DeadLetter {
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
    type: message.subject || typeProperty(message),
    state: message.state,
    ...(withBody ? { body: bodyText(message.body), properties: headersOf(message) } : {}),
  };
}

function bodyText(body: unknown): string {
  if (Buffer.isBuffer(body)) return body.toString("utf8");
  if (body instanceof Uint8Array) return Buffer.from(body).toString("utf8");
  return typeof body === "string" ? body : JSON.stringify(body);
}

function typeProperty(message: ServiceBusReceivedMessage): string | undefined {
  const value = message.applicationProperties?.[TYPE_PROPERTY];
  return typeof value === "string" && value !== "" ? value : undefined;
}

/** What the headers and properties view shows beside the body. */
function headersOf(message: ServiceBusReceivedMessage): Record<string, unknown> {
  return {
    contentType: message.contentType,
    correlationId: message.correlationId,
    sessionId: message.sessionId,
    partitionKey: message.partitionKey,
    replyTo: message.replyTo,
    to: message.to,
    timeToLive: message.timeToLive,
    deadLetterSource: message.deadLetterSource,
    applicationProperties: message.applicationProperties ?? {},
  };
}
