import type { ServiceBusReceivedMessage, ServiceBusReceiver } from "@azure/service-bus";
import type { Logger } from "../telemetry/logger.ts";
import { recordThrottled } from "../telemetry/throttle-metrics.ts";
import { isThrottled } from "./throttling.ts";

export interface LockKeeperOptions {
  /** The entity's LockDuration; without it, the lock the message came with. */
  readonly lockDurationMs?: number;
  /** The worker's maxAutoLockRenewalDurationInMs: no lock is kept longer after receipt (0: none is kept). */
  readonly maxAutoLockRenewalMs: number;
  readonly entity: string;
  readonly logger: Logger;
}

/**
 * Keeps a message's lock while the worker holds it, where the SDK's own renewal gave up. @azure/service-bus 7.9's
 * lock renewer renews once per cycle, without retrying: one ServerBusy answer to a renewal (a throttled namespace)
 * ends the renewal of that message, and its lock runs out under a handler still working, which costs a delivery.
 * A lock with 0.45 of its duration or less left (15 s at most) is renewed here (`renewMessageLock`, which the SDK does
 * not retry either), again while throttled. Standard throttles by credits a second, so the checks are jittered
 * (each message its own start and spacing): the tries of messages received together, and the retries after a
 * ServerBusy, fall in different seconds instead of all in the same exhausted one. Also kept while a throttled
 * settlement is retried by lock token (the SDK stops its renewal at a settlement's first try). Returns the
 * function that stops it.
 */
export function keepLock(
  receiver: ServiceBusReceiver,
  message: ServiceBusReceivedMessage,
  options: LockKeeperOptions,
): () => void {
  const lockedUntil = message.lockedUntilUtc?.getTime();
  if (options.maxAutoLockRenewalMs <= 0 || lockedUntil === undefined || message.lockToken === undefined)
    return () => {};
  const began = Date.now();
  const lockMs = options.lockDurationMs ?? Math.max(1_000, lockedUntil - began);
  // Just after the SDK's own renewal point (half the lock for locks under 20 s: a 5 s lock, 2.5 s left), so a
  // renewal the SDK made is not doubled, with tries spread over several seconds still before the lock runs out.
  const margin = Math.max(200, Math.min(lockMs * 0.45, 15_000));
  const spacing = Math.max(50, Math.min(margin / 6, 1_000));
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const stop = (): void => {
    stopped = true;
    clearTimeout(timer);
  };
  const next = (): void => {
    if (stopped) return;
    // 0.5 to 1.5 of the spacing: neighbours drift apart instead of checking in step
    timer = setTimeout(check, spacing * (0.5 + Math.random()));
    timer.unref();
  };
  const check = (): void => {
    if (stopped) return;
    const now = Date.now();
    if (now - began >= options.maxAutoLockRenewalMs) return stop();
    const left = (message.lockedUntilUtc?.getTime() ?? 0) - now;
    if (left <= 0) return stop();
    if (left > margin) return next();
    receiver
      .renewMessageLock(message)
      .catch((error: unknown) => {
        if (isThrottled(error)) return recordThrottled("renew_lock", options.entity);
        options.logger.debug("keeping a lock the SDK stopped renewing failed", {
          messageId: message.messageId,
          error,
        });
        stop();
      })
      .finally(next);
  };
  next();
  return stop;
}
