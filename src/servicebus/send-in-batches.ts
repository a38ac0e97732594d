import type { ServiceBusMessage, ServiceBusMessageBatch, ServiceBusSender } from "@azure/service-bus";

// Prepared messages into batches filled to the link's size limit, with batches in flight overlapping the filling of
// the next; the publisher (publisher.ts) sends through it, and a caller with its own messages may too.

/**
 * What a failed `publishBatch` or `publishAll` attaches to its error. `acknowledged`: the events the broker
 * acknowledged. `acknowledgedPrefix`: how many from the start are all acknowledged; with `maxInFlight` above 1 a
 * batch after a failed one can still be acknowledged, so the two can differ, and only the prefix says "every event
 * before this one is on the broker".
 */
export interface PublishFailure {
  acknowledged: number;
  acknowledgedPrefix: number;
  /**
   * Events in batches that were sent and failed: the broker may still hold some of them (it stored a batch, and
   * its acknowledgement was lost with the connection), so the broker has from `acknowledged` to `acknowledged` +
   * `unconfirmed` of the call's events.
   */
  unconfirmed: number;
}

export interface SendInBatchesOptions {
  /** Batches sent and not yet acknowledged, at most (default 1: strict order, even across a resend). */
  readonly maxInFlight?: number;
  /** Called after each acknowledged batch with its message count, in order. */
  readonly onSent?: (count: number) => void;
  /** Sends one batch (default `sender.sendMessages`); the publisher wraps it in its resend. */
  readonly send?: (batch: ServiceBusMessageBatch) => Promise<void>;
}

/**
 * Sends prepared messages in order, in batches filled to the size limit the link advertises. While a batch is in
 * flight the next one is filled, so encoding overlaps the round trip; a batch is sent only when fewer than
 * `maxInFlight` are unacknowledged. Memory holds at most `maxInFlight` + 1 batches, whatever the source's length.
 * A message too large for an empty batch is an error. Resolves with the number of messages sent. A failure's error
 * carries `acknowledged` and `acknowledgedPrefix` (`PublishFailure`). A batch holds messages of one session id
 * only (or none with one): a partitioned entity refuses a send whose messages have different partition keys (SDK
 * TROUBLESHOOTING.md, "Cannot send batch with multiple partition keys"), and the session id is the partition key.
 * So a new batch starts where the session id changes: events given grouped by key take the fewest sends.
 */
export function sendInBatches(
  sender: Pick<ServiceBusSender, "createMessageBatch" | "sendMessages">,
  messages: Iterable<ServiceBusMessage> | AsyncIterable<ServiceBusMessage>,
  options: SendInBatchesOptions = {},
): Promise<number> {
  return sendBuilt(sender, messages, same, options);
}

/** `sendInBatches` over items that `build` turns into messages one at a time, as the batch takes them. */
export async function sendBuilt<T>(
  sender: Pick<ServiceBusSender, "createMessageBatch" | "sendMessages">,
  items: Iterable<T> | AsyncIterable<T>,
  build: (item: T) => ServiceBusMessage,
  options: SendInBatchesOptions = {},
): Promise<number> {
  const maxInFlight = options.maxInFlight ?? 1;
  const send = options.send ?? ((batch: ServiceBusMessageBatch) => sender.sendMessages(batch));
  const inFlight: { pending: Promise<void>; count: number }[] = [];
  let sent = 0;
  // Events acknowledged from the start with no failed batch before them; with maxInFlight > 1 a batch after a
  // failed one may still be acknowledged, and counts in `sent` but not here.
  let prefix = 0;
  let failed = false;
  // Events of sent batches that failed: maybe on the broker, never acknowledged.
  let unconfirmed = 0;
  const settle = async (keep: number): Promise<void> => {
    while (inFlight.length > keep) {
      const { pending, count } = inFlight.shift()!;
      try {
        await pending;
      } catch (error) {
        failed = true;
        unconfirmed += count;
        throw error;
      }
      sent += count;
      if (!failed) prefix += count;
      options.onSent?.(count);
    }
  };
  const dispatch = async (batch: ServiceBusMessageBatch): Promise<void> => {
    await settle(maxInFlight - 1);
    const pending = send(batch);
    // Awaited in order by `settle`; this only keeps a failure from counting as unhandled until then.
    pending.catch(() => {});
    inFlight.push({ pending, count: batch.count });
    // One turn of the event loop lets the SDK put the batch on the wire before the next is filled, so the
    // broker works on it while this process encodes.
    await new Promise<void>((resolve) => setImmediate(resolve));
  };
  let batch: ServiceBusMessageBatch | undefined;
  // The session id of the messages in `batch` (undefined: none has one).
  let batchSession: string | undefined;
  const rollOver = async (message: ServiceBusMessage): Promise<void> => {
    if (batch!.count === 0) throw tooLarge(message);
    await dispatch(batch!);
    batch = await sender.createMessageBatch();
    batchSession = message.sessionId;
    if (!batch.tryAddMessage(message)) throw tooLarge(message);
  };
  // A new batch when this one is full, or holds another session id's messages.
  const fits = (message: ServiceBusMessage): boolean => {
    if (batch!.count > 0 && message.sessionId !== batchSession) return false;
    batchSession = message.sessionId;
    return batch!.tryAddMessage(message);
  };
  try {
    batch = await sender.createMessageBatch();
    // Two loops so a plain array costs no promise per message; only a full batch makes the loop wait.
    if (Symbol.asyncIterator in items) {
      for await (const item of items) {
        const message = build(item);
        if (!fits(message)) await rollOver(message);
      }
    } else {
      for (const item of items) {
        const message = build(item);
        if (!fits(message)) await rollOver(message);
      }
    }
    if (batch.count > 0) await dispatch(batch);
    await settle(0);
  } catch (error) {
    // Whatever is already on its way is waited for, so `onSent` reports exactly what the broker acknowledged.
    await Promise.allSettled(inFlight.map((f) => f.pending));
    // Every remaining batch is settled, past a failed one too, so `acknowledged` is the broker's whole count.
    while (inFlight.length > 0) await settle(0).catch(() => {});
    if (error !== null && typeof error === "object") {
      const failure: PublishFailure = { acknowledged: sent, acknowledgedPrefix: prefix, unconfirmed };
      Object.assign(error, failure);
    }
    throw error;
  }
  return sent;
}

export function tooLarge(message: ServiceBusMessage, where?: string, limit?: number): RangeError {
  const what = where ?? `message ${String(message.messageId)}`;
  const of = limit !== undefined ? ` (${limit} bytes)` : "";
  return new RangeError(`${what} is larger than a batch may be${of}`);
}

export const same = <T>(x: T): T => x;
