import type { ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiver } from "@azure/service-bus";
import { recordThrottled, type ThrottledOperation } from "../telemetry/throttle-metrics.ts";
import { byLockToken, isThrottled, isTransient, retryWhileThrottled } from "./throttling.ts";

/**
 * ServerBusy answers met by the dead-letter tools (console, `sbinbox dlq`), per client, so that a run can say what
 * was throttled. Their clients make one SDK try per call (OWN_RETRY), and each call is retried here.
 */
export type ThrottleTally = Partial<Record<ThrottledOperation, number>>;

const tallies = new WeakMap<object, ThrottleTally>();
/** A receiver's or sender's client, for its tally (set by `tallied`). */
const owners = new WeakMap<object, object>();

/**
 * How many times a dead-letter tool tries a call again after a transient error other than ServerBusy (a dropped
 * connection, a timeout), 2 s apart: OWN_RETRY turned off the SDK's own 3 retries, and one blip should not fail a
 * run. A replay's copy has a stable MessageId (the inbox key and replay number), so a send retried after a timeout
 * that did reach the broker, or a rerun of a replay that sent but did not complete, is dropped by duplicate
 * detection, and the worker's inbox applies the key once either way.
 */
export const TRANSIENT_RETRIES = 2;

/** How long a dead-letter tool keeps retrying one throttled call: a burst of a minute, as Standard's are. */
export const BUSY_BUDGET_MS = 60_000;

/** The counts so far for `client` (a copy). */
export function throttledSoFar(client: ServiceBusClient): ThrottleTally {
  return { ...(tallies.get(client) ?? {}) };
}

/** What was throttled between two tallies, in words ("receive 3, send 1"); undefined when nothing was. */
export function describeThrottled(before: ThrottleTally, after: ThrottleTally): string | undefined {
  const parts = Object.entries(after)
    .map(([op, n]) => [op, n - (before[op as ThrottledOperation] ?? 0)] as const)
    .filter(([, n]) => n > 0)
    .map(([op, n]) => `${op} ${n}`);
  return parts.length > 0 ? parts.join(", ") : undefined;
}

/** Marks a receiver or sender as `client`'s, so that what it meets is counted in the client's tally. */
export function tallied<T extends object>(client: ServiceBusClient, handle: T): T {
  owners.set(handle, client);
  return handle;
}

function count(handle: object, operation: ThrottledOperation, entity: string): void {
  recordThrottled(operation, entity);
  const owner = owners.get(handle);
  if (owner === undefined) return;
  const tally = tallies.get(owner) ?? {};
  tally[operation] = (tally[operation] ?? 0) + 1;
  tallies.set(owner, tally);
}

/**
 * One SDK call of a dead-letter tool, tried again while Service Bus answers it ServerBusy, 1-3 s apart, for up to
 * BUSY_BUDGET_MS; each refusal counted. Past that the last refusal is thrown (the run then fails or reports the
 * message as not done: it is still dead-lettered, nothing is lost).
 */
export function whileBusy<T>(
  handle: { readonly entityPath: string },
  operation: ThrottledOperation,
  attempt: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const deadline = Date.now() + BUSY_BUDGET_MS;
  return retryWhileThrottled(attempt, () => deadline, {
    onThrottled: () => count(handle, operation, handle.entityPath),
    transientRetries: TRANSIENT_RETRIES,
  });
}

/**
 * Completes a locked dead letter. A completion throttled on the link leaves the delivery settled and the message
 * locked: it is sent again by lock token over `$management` while the lock lasts (as the worker does), so the
 * message is either removed or, at the lock's end, back in the dead-letter queue as it was.
 */
export async function completeWhileBusy(
  receiver: ServiceBusReceiver,
  message: ServiceBusReceivedMessage,
): Promise<void> {
  try {
    await receiver.completeMessage(message);
  } catch (error) {
    const throttled = isThrottled(error);
    if (!throttled && !isTransient(error)) throw error;
    if (throttled) count(receiver, "settle", receiver.entityPath);
    await retryWhileThrottled(
      () => receiver.completeMessage(byLockToken(message)),
      () => message.lockedUntilUtc?.getTime() ?? 0,
      {
        onThrottled: () => count(receiver, "settle", receiver.entityPath),
        transientRetries: throttled ? TRANSIENT_RETRIES : TRANSIENT_RETRIES - 1,
      },
    );
  }
}
