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
 * The SDK renews with min(half the time left, 10 s) to go; a lock found closer to its end than 0.4 of its duration
 * (8 s at most) was not renewed, and is renewed here (`renewMessageLock`, which the SDK does not retry either), again on each check
 * while throttled. Also kept while a throttled settlement is retried by lock token (the SDK stops its renewal at
 * a settlement's first try). Returns the function that stops it.
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
  // Below the SDK's own renewal point (a 5 s lock: 2.5 s left), with room for several tries 2 s apart or less.
  const margin = Math.max(200, Math.min(lockMs * 0.4, 8_000));
  let renewing = false;
  let stopped = false;
  const stop = (): void => {
    stopped = true;
    clearInterval(timer);
  };
  const check = (): void => {
    if (renewing || stopped) return;
    const now = Date.now();
    if (now - began >= options.maxAutoLockRenewalMs) return stop();
    const left = (message.lockedUntilUtc?.getTime() ?? 0) - now;
    if (left > margin) return;
    if (left <= 0) return stop();
    renewing = true;
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
      .finally(() => (renewing = false));
  };
  const timer = setInterval(check, Math.max(50, Math.min(margin / 4, 1_000)));
  timer.unref();
  return stop;
}
