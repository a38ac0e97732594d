import { ConfigError } from "../domain/errors.ts";

/** The broker settings that bound how late a message can still be delivered again. */
export interface RedeliveryWindow {
  /** The queue's lock duration (LockDuration), in milliseconds. */
  readonly lockDurationMs: number;
  /** The queue's MaxDeliveryCount. */
  readonly maxDeliveryCount: number;
  /** The message time to live (DefaultMessageTimeToLive or the message's own), in milliseconds. */
  readonly messageTimeToLiveMs: number;
}

/** The shortest retention that still outlives every redelivery of a message: lock x deliveries + TTL. */
export function minimumRetentionMs(window: RedeliveryWindow): number {
  return window.lockDurationMs * window.maxDeliveryCount + window.messageTimeToLiveMs;
}

/**
 * Refuses a retention the broker can outlive: if a marker were deleted while its message can still arrive,
 * the redelivery would run the effect a second time. The setting names are the ones the error reports.
 */
export function validateRetention(
  retentionMs: number,
  window: RedeliveryWindow,
  names: { retention: string; lockDuration: string; maxDeliveryCount: string; messageTimeToLive: string } = {
    retention: "inbox.retention",
    lockDuration: "servicebus.lockDuration",
    maxDeliveryCount: "servicebus.maxDeliveryCount",
    messageTimeToLive: "servicebus.messageTimeToLive",
  },
): void {
  const positive: [string, number][] = [
    [names.retention, retentionMs],
    [names.lockDuration, window.lockDurationMs],
    [names.maxDeliveryCount, window.maxDeliveryCount],
    [names.messageTimeToLive, window.messageTimeToLiveMs],
  ];
  for (const [name, value] of positive) {
    if (!Number.isFinite(value) || value <= 0)
      throw new ConfigError(name, `must be a positive number, got ${value}`);
  }
  const minimum = minimumRetentionMs(window);
  if (retentionMs < minimum) {
    throw new ConfigError(
      names.retention,
      `${retentionMs} ms is shorter than the broker can still redeliver a message: ` +
        `${names.lockDuration} (${window.lockDurationMs} ms) x ${names.maxDeliveryCount} (${window.maxDeliveryCount}) ` +
        `+ ${names.messageTimeToLive} (${window.messageTimeToLiveMs} ms) = ${minimum} ms`,
    );
  }
}
