import { isServiceBusError, type RetryOptions } from "@azure/service-bus";

/**
 * The retry options sbinbox gives its Service Bus clients. @azure/service-bus 7.9 retries a retryable error
 * (ServerBusy among them) 3 times 30 s apart by default (core-amqp's `defaultDelayBetweenOperationRetriesInMs`,
 * fixed mode), where Service Bus's ServerBusy text asks to "wait 2 seconds and try again" and a settlement or a lock
 * renewal has at most the lock's time left: 2 s, as the service asks.
 */
export const SERVICE_BUS_RETRY: RetryOptions = { maxRetries: 3, retryDelayInMs: 2_000 };

/** Service Bus's advice in its ServerBusy text: wait this long before trying again. */
export const SERVER_BUSY_WAIT_MS = 2_000;

/**
 * Whether an error is Service Bus's ServerBusy (code `ServiceBusy`), also inside the AggregateError the SDK throws
 * when its retry met more than one error (a throttled settlement retried on its link ends as [ServiceBusy,
 * "already settled"]).
 */
export function isThrottled(error: unknown): boolean {
  if (isServiceBusError(error)) return error.code === "ServiceBusy";
  if (error instanceof AggregateError) return error.errors.some(isThrottled);
  return false;
}

/** Sleeps `ms`, or less when `signal` aborts. */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Runs `attempt` again while Service Bus answers it ServerBusy, `SERVER_BUSY_WAIT_MS` apart (less near the end),
 * until `deadline` (epoch ms, read again before each wait: a renewed lock moves it); `onThrottled` is told of each
 * refusal. Any other error, or a refusal with too little time left to wait, is thrown as it came.
 */
export async function retryWhileThrottled<T>(
  attempt: () => Promise<T>,
  deadline: () => number,
  onThrottled: () => void,
): Promise<T> {
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (!isThrottled(error)) throw error;
      onThrottled();
      const left = deadline() - Date.now();
      // Too close to the deadline for a try to be answered in time (a lock about to end, say).
      if (left < 500) throw error;
      await pause(Math.min(SERVER_BUSY_WAIT_MS, left / 2));
    }
  }
}
