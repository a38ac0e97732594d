import {
  isServiceBusError,
  type ServiceBusClient,
  type ServiceBusMessage,
  type ServiceBusMessageBatch,
  type ServiceBusSender,
} from "@azure/service-bus";
import { ROOT_CONTEXT, trace, type Span } from "@opentelemetry/api";
import { createServiceBusClient, type ServiceBusTarget } from "./client.ts";
import { sendUnlessDropped } from "./connection-drop.ts";
import { recordThrottled } from "../telemetry/throttle-metrics.ts";
import { isThrottled, OWN_RETRY } from "./throttling.ts";
import { endSpan, injectTraceContext, producerContext, startSendSpan } from "./tracing.ts";

/** One outbox row as the relay hands it to the sender. */
export interface OutboxMessage {
  readonly id: string;
  readonly messageId: string;
  readonly type: string;
  /** JSON text, sent as UTF-8 bytes. */
  readonly body: string;
  /** A JSON object of application properties, or null. */
  readonly properties: string | null;
  readonly correlationId: string | null;
  readonly traceParent: string | null;
  readonly traceState: string | null;
  /** The session key: the message's sessionId and partition key (Service Bus requires the two to match). */
  readonly sessionId?: string | null;
  /** Claimed for its first try: no copy can have reached the broker before this send. */
  readonly firstTry?: boolean;
}

/** What became of each row of one `send`; every row given is in exactly one list. */
export interface SendReport {
  /** Accepted by the broker (or dropped by it as a copy, which is the same to the relay). */
  readonly sent: string[];
  /** Refused for good: this row can never be sent as it is. */
  readonly setAside: { readonly id: string; readonly error: string }[];
  /** Not sent because of a failure that is not the row's (broker or network); try again later. */
  readonly retry: string[];
  readonly error?: unknown;
  /**
   * False when the failure proves that none of the `retry` rows reached the broker (the link could not be
   * opened, the queue does not exist, the identity may not send, the connection was refused); true when a copy
   * may have been accepted (a timeout, a lost connection or disposition). Only the latter starts the
   * duplicate-detection window for those rows. With several session keys in one call, true when any key's
   * failure may have reached the broker; `notReached` says it row by row.
   */
  readonly mayHaveReached: boolean;
  /**
   * The `retry` rows that provably never reached the broker: not started before `startBy`, or in a send whose
   * failure proves nothing was accepted. The relay restarts the window of those on their first try only.
   */
  readonly notReached: string[];
}

export interface SendOptions {
  /**
   * Epoch ms: a batch is started only before this, and a send still running at `abortAt` is aborted. Rows not
   * started go to `retry` as never sent. The relay sets these from its lease and SBINBOX_OUTBOX_SEND_TIMEOUT_MS.
   */
  readonly startBy?: number;
  readonly abortAt?: number;
}

export interface OutboxSender {
  readonly queue: string;
  send(rows: readonly OutboxMessage[], options?: SendOptions): Promise<SendReport>;
  close(): Promise<void>;
}

export interface OutboxSenderOptions {
  readonly queue: string;
  /** An existing client (not closed by the sender), or where to connect (closed by `close`). */
  readonly client?: ServiceBusClient;
  readonly connection?: ServiceBusTarget;
}

/**
 * Errors that belong to one message, not to the broker or the link: retrying that message can never succeed.
 * Everything else (entity not found, unauthorized, busy, network) is the relay's problem, and the rows wait.
 */
const ROW_ERROR_CODES = new Set(["MessageSizeExceeded"]);

/** Service Bus errors in which the broker refused the send, or it never got that far: nothing was accepted. */
const NOT_DELIVERED_CODES = new Set([
  "MessagingEntityNotFound",
  "MessagingEntityDisabled",
  "UnauthorizedAccess",
]);
/** Socket errors from before any byte was sent (the SDK passes them on, or wraps them as the cause). */
const NOT_CONNECTED_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
]);

/** True unless `error` proves that the send never reached the broker. */
export function mayHaveReachedBroker(error: unknown): boolean {
  for (let e = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (isServiceBusError(e) && NOT_DELIVERED_CODES.has(e.code)) return false;
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && NOT_CONNECTED_CODES.has(code)) return false;
  }
  return true;
}

class RowError extends Error {}

/** Builds the message of a row; a row whose stored properties cannot be read is a RowError. */
export function toOutboxServiceBusMessage(row: OutboxMessage): ServiceBusMessage {
  let properties: Record<string, string | number | boolean> = {};
  if (row.properties !== null) {
    try {
      properties = JSON.parse(row.properties) as typeof properties;
    } catch (error) {
      throw new RowError(`stored properties are not JSON: ${(error as Error).message}`);
    }
    if (typeof properties !== "object" || properties === null || Array.isArray(properties))
      throw new RowError("stored properties are not a JSON object");
  }
  return {
    messageId: row.messageId,
    subject: row.type,
    contentType: "application/json",
    body: Buffer.from(row.body, "utf8"),
    correlationId: row.correlationId ?? undefined,
    ...(row.sessionId ? { sessionId: row.sessionId, partitionKey: row.sessionId } : {}),
    applicationProperties: { ...properties },
  };
}

/**
 * Sends of different session keys in flight at once, at most. Each key is its own send (see createOutboxSender),
 * and a claim holds one head per key, so a claim of many keys is that many one-message sends: side by side, they
 * cost about one round trip per this many keys instead of one per key.
 */
export const MAX_CONCURRENT_KEY_SENDS = 8;

/**
 * The relay's sending side: fills size-limited batches in row order and sends them; sorts each row into sent,
 * set aside (this row can never be sent) or retry (the broker or network failed; stop here so that order holds).
 * Rows are sent per session key: a partitioned entity refuses a send whose messages have different partition keys
 * (SDK TROUBLESHOOTING.md, "Cannot send batch with multiple partition keys"), and a session key is the partition
 * key. Rows without a key go out in batches as before; each key's rows in their order, one batch after another;
 * different keys (which have no order between them) side by side, up to MAX_CONCURRENT_KEY_SENDS. A failure that
 * is not a row's stops only its own key (or the rows without one): their later rows wait, the other keys go on.
 */
export function createOutboxSender(options: OutboxSenderOptions): OutboxSender {
  if (!options.client && !options.connection)
    throw new TypeError("createOutboxSender needs a client or a connection");
  const ownsClient = !options.client;
  // One SDK try per send, as the relay's CLI client: the relay retries with its own back-off.
  const client = options.client ?? createServiceBusClient(options.connection!, { retryOptions: OWN_RETRY });
  const sender: ServiceBusSender = client.createSender(options.queue);
  const queue = options.queue;

  /** A PRODUCER span per row, continuing the trace stored with it; the message carries the span's context. */
  function traced(row: OutboxMessage, message: ServiceBusMessage): Span {
    const stored = producerContext({
      ...(row.traceParent !== null ? { traceparent: row.traceParent } : {}),
      ...(row.traceState !== null ? { tracestate: row.traceState } : {}),
    });
    const parent = stored ? trace.setSpanContext(ROOT_CONTEXT, stored) : ROOT_CONTEXT;
    const { span, ctx } = startSendSpan(queue, 1, row.messageId, parent);
    injectTraceContext(ctx, (message.applicationProperties ??= {}));
    return span;
  }

  /**
   * The row's span, started when the row is first put in a batch (its context is in the message, so before the
   * size check): a row never started (the lease ran short) has no span, so a later claim's send is its only one.
   */
  function started(entry: Entry): Entry {
    entry.span ??= traced(entry.row, entry.message);
    return entry;
  }

  /** One send; a ServerBusy answer is counted (`sbinbox.servicebus.throttled`, send) and retried by the relay. */
  async function sendCounted(
    message: ServiceBusMessage | ServiceBusMessageBatch,
    signal?: AbortSignal,
  ): Promise<void> {
    try {
      await sendUnlessDropped(client, sender, message, signal);
    } catch (error) {
      if (isThrottled(error)) recordThrottled("send", queue);
      throw error;
    }
  }

  /** One row alone; resolves with the failure if it is not the row's own (the row is then not settled). */
  async function sendOne(entry: Entry, report: Mutable<SendReport>): Promise<{ error: unknown } | undefined> {
    try {
      await sendCounted(entry.message);
      endSpan(entry.span!);
      report.sent.push(entry.row.id);
    } catch (error) {
      endSpan(entry.span!, error);
      if (!isRowError(error)) return { error };
      report.setAside.push({ id: entry.row.id, error: describe(error) });
    }
    return undefined;
  }

  /**
   * The rows of one session key (or all rows without one), in order: batches one after another; at the first
   * failure that is not a row's, this and every later row of the group go to retry, so the group's order holds.
   */
  async function sendGroup(
    entries: readonly Entry[],
    report: Mutable<SendReport>,
    options: SendOptions,
    signal: AbortSignal,
  ): Promise<void> {
    const waitFrom = (from: number, error: unknown, reached: boolean): void => {
      if (error !== undefined) report.error ??= error;
      report.mayHaveReached ||= reached;
      for (const rest of entries.slice(from)) {
        if (isSettled(rest.row.id, report)) continue;
        if (rest.span) endSpan(rest.span, error);
        report.retry.push(rest.row.id);
        if (!reached) report.notReached.push(rest.row.id);
      }
    };
    let index = 0;
    try {
      while (index < entries.length) {
        if (options.startBy !== undefined && Date.now() >= options.startBy) {
          // Too late to start a send that must end inside the lease: the rest waits, never sent.
          return waitFrom(index, undefined, false);
        }
        let batch: ServiceBusMessageBatch;
        try {
          batch = await sender.createMessageBatch();
        } catch (error) {
          // The link to the queue could not be opened: nothing of this batch or after it was sent.
          throw Object.assign(new NotSentError(), { cause: error });
        }
        const inBatch: Entry[] = [];
        while (index < entries.length) {
          const entry = started(entries[index]!);
          const fits = tryAdd(batch, entry, report);
          if (fits === false) break;
          if (fits === true) inBatch.push(entry);
          index += 1;
        }
        if (inBatch.length === 0 && index === entries.length) break; // every row left was set aside
        if (inBatch.length === 0) {
          // Too large for an empty batch: larger than the queue's maximum message size.
          const entry = entries[index]!;
          const error = `MessageSizeExceeded: message ${entry.row.messageId} is larger than the queue allows (${batch.maxSizeInBytes} bytes per batch)`;
          endSpan(entry.span!, Object.assign(new Error(error), { code: "MessageSizeExceeded" }));
          report.setAside.push({ id: entry.row.id, error });
          index += 1;
          continue;
        }
        try {
          // Failing at once if the connection drops, not by a throw from rhea-promise's timer (connection-drop.ts).
          await sendCounted(batch, signal);
          for (const entry of inBatch) {
            endSpan(entry.span!);
            report.sent.push(entry.row.id);
          }
        } catch (error) {
          if (!isRowError(error)) throw error;
          // The broker refused the batch for one of its messages: one at a time, to find it.
          for (let i = 0; i < inBatch.length; i++) {
            const failed = await sendOne(inBatch[i]!, report);
            if (failed)
              return waitFrom(index - inBatch.length + i, failed.error, mayHaveReachedBroker(failed.error));
          }
        }
      }
    } catch (error) {
      // A failure that is not one row's: this batch and everything after it in the group wait, so order holds.
      const notSent = error instanceof NotSentError;
      waitFrom(0, notSent ? error.cause : error, !notSent && mayHaveReachedBroker(error));
    }
  }

  return {
    queue,
    async send(rows, options = {}) {
      const report: Mutable<SendReport> = {
        sent: [],
        setAside: [],
        retry: [],
        mayHaveReached: false,
        notReached: [],
      };
      const abort = new AbortController();
      const abortTimer =
        options.abortAt !== undefined
          ? setTimeout(() => abort.abort(), Math.max(0, options.abortAt - Date.now()))
          : undefined;
      // One group per session key, and one for the rows without a key; each in row order.
      const groups = new Map<string | null, Entry[]>();
      for (const row of rows) {
        try {
          const message = toOutboxServiceBusMessage(row);
          const key = row.sessionId || null;
          let group = groups.get(key);
          if (!group) groups.set(key, (group = []));
          group.push({ row, message });
        } catch (error) {
          report.setAside.push({ id: row.id, error: describe(error) });
        }
      }
      const queued = [...groups.values()];
      const worker = async (): Promise<void> => {
        for (let group = queued.shift(); group; group = queued.shift())
          await sendGroup(group, report, options, abort.signal);
      };
      try {
        await Promise.all(Array.from({ length: Math.min(MAX_CONCURRENT_KEY_SENDS, queued.length) }, worker));
      } finally {
        clearTimeout(abortTimer);
      }
      return report;
    },
    async close() {
      await sender.close();
      if (ownsClient) await client.close();
    },
  };
}

class NotSentError extends Error {}

interface Entry {
  readonly row: OutboxMessage;
  readonly message: ServiceBusMessage;
  /** Started by `started` when the row first goes into a batch. */
  span?: Span;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

function isSettled(id: string, report: SendReport): boolean {
  return report.sent.includes(id) || report.setAside.some((s) => s.id === id) || report.retry.includes(id);
}

/**
 * Adds the row's message to the batch: false when it does not fit; "setAside" when the SDK refuses its shape
 * (a sessionId, partition key or MessageId over 128 UTF-16 units), which no retry cures.
 */
function tryAdd(
  batch: ServiceBusMessageBatch,
  entry: Entry,
  report: Mutable<SendReport>,
): boolean | "setAside" {
  try {
    return batch.tryAddMessage(entry.message);
  } catch (error) {
    if (!isRowError(error)) throw error;
    endSpan(entry.span!, error);
    report.setAside.push({ id: entry.row.id, error: describe(error) });
    return "setAside";
  }
}

function isRowError(error: unknown): boolean {
  if (error instanceof RowError) return true;
  if (error instanceof Error && SDK_SHAPE_ERROR.test(error.message)) return true;
  if (!isServiceBusError(error)) return false;
  // A session-enabled queue refuses a message without a session id, as a GeneralError: no retry cures the row.
  return ROW_ERROR_CODES.has(error.code) || NO_SESSION_ID.test(error.message);
}

/**
 * The SDK's own refusal of a message's shape, a plain Error thrown while the message is encoded (toRheaMessage in
 * @azure/service-bus 7.9): the row can never be sent as it is.
 */
const SDK_SHAPE_ERROR =
  /^Length of '(sessionId|partitionKey|messageId)' property on the message cannot be greater than/;

/** Service Bus's words (Azure/azure-service-bus#196), which the local broker gives too. */
const NO_SESSION_ID = /The SessionId was not set on a message, and it cannot be sent to the entity/;

function describe(error: unknown): string {
  if (isServiceBusError(error)) return `${error.code}: ${error.message}`;
  if (error instanceof Error) return error.message;
  return String(error);
}
