import { isServiceBusError, type RetryOptions, type ServiceBusReceivedMessage } from "@azure/service-bus";

/**
 * The retry options of a client whose caller retries ServerBusy itself (the worker, the publisher's and the
 * console's own clients): each SDK call is one try, and the caller waits `throttledWaitMs` and tries again within
 * its own deadline (a lock, the duplicate window). Every other client keeps the SDK's default.
 *
 * That default, in @azure/service-bus 7.9.5 on @azure/core-amqp 4.5.1 (`retry()` in core-amqp's retry.js, its
 * `Constants.defaultMaxRetries` and `defaultDelayBetweenOperationRetriesInMs`), is 3 retries in fixed mode, 30 s
 * apart, for every retryable error alike: ServerBusy (`ServerBusyError`, retryable) gets no wait of its own, unlike
 * the .NET client (Azure.Messaging.ServiceBus's `ServiceBusRetryPolicy`: marked busy for `ServerBusyBaseSleepTime`,
 * 10 s, and waiting that long before each try while marked; its 7.20.1 release notes say "the standard throttling
 * time of 30 seconds" when comparing a short TryTimeout, a figure not in the source read). 30 s is longer than Service Bus asks ("Please wait 2 seconds
 * and try again") and than a short lock lasts, and a retry inside the SDK cannot see a lock's end, so the loops that
 * must stop at a lock do the retrying and leave the SDK one try.
 *
 * `retryDelayInMs` here is then only the pause between the SDK's own cycles of re-opening a receive link
 * (`retryForever`, which a subscription runs whatever maxRetries says): 2 s, as sbinbox's receivers always had.
 */
export const OWN_RETRY: RetryOptions = { maxRetries: 0, retryDelayInMs: 2_000 };

/** Service Bus's advice in its ServerBusy text (error 50009): wait this long before trying again. */
export const SERVER_BUSY_WAIT_MS = 2_000;

/**
 * The wait before trying a throttled operation again: Service Bus's 2 s, jittered to 1-3 s. Standard counts
 * credits a second, so tries that were refused together and waited alike would meet the same exhausted second.
 */
export function throttledWaitMs(random: () => number = Math.random): number {
  return Math.round(SERVER_BUSY_WAIT_MS * (0.5 + random()));
}

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
 * A throttled operation retried until its deadline (a message's lock) without getting through: the message is
 * left to the broker, which redelivers it when the lock ends. `cause` is the last refusal, or undefined when the
 * deadline came while a try was unanswered.
 */
export class ThrottledPastDeadlineError extends Error {
  override readonly name = "ThrottledPastDeadlineError";
  readonly code = "ThrottledPastDeadline";
  /** Tries answered ServerBusy. */
  readonly refusals: number;
  readonly waitedMs: number;

  constructor(refusals: number, waitedMs: number, cause: unknown) {
    super(
      `still throttled (ServerBusy) after ${refusals} tries in ${waitedMs} ms, at the deadline (the message's lock)`,
      { cause },
    );
    this.refusals = refusals;
    this.waitedMs = waitedMs;
  }
}

export interface RetryWhileThrottledOptions {
  /** Told of each refusal. */
  readonly onThrottled: () => void;
  /** The jitter's source; injectable for tests. */
  readonly random?: () => number;
  /**
   * How many times a transient error other than ServerBusy (one the SDK marks `retryable`: a connection problem, a
   * timeout) is tried again, TRANSIENT_WAIT_MS apart, within the deadline; 0 (the default) throws it at once. For
   * callers on OWN_RETRY that no lock bounds (the dead-letter tools), whose SDK no longer retries those itself.
   */
  readonly transientRetries?: number;
}

/** The wait before trying a transient error again: the SDK default's retry delay before OWN_RETRY, 2 s. */
export const TRANSIENT_WAIT_MS = 2_000;

/** A retryable error (the SDK's `retryable`) that is not ServerBusy. */
export function isTransient(error: unknown): boolean {
  if (isThrottled(error)) return false;
  return (error as { retryable?: unknown } | undefined)?.retryable === true;
}

/**
 * Runs `attempt` again while Service Bus answers it ServerBusy, `throttledWaitMs` apart, until `deadline` (epoch ms,
 * read again at each step: a renewed lock moves it). Every try is bounded by the deadline too: it gets a signal that
 * aborts there (for SDK calls that take one), and a try still unanswered at the deadline is given up on (its late
 * answer is dropped), so however the client retries inside a call the loop ends at the lock. Throws
 * `ThrottledPastDeadlineError` at the deadline; any other error as it came.
 */
export async function retryWhileThrottled<T>(
  attempt: (signal: AbortSignal) => Promise<T>,
  deadline: () => number,
  options: RetryWhileThrottledOptions,
): Promise<T> {
  const began = Date.now();
  let refusals = 0;
  let transientLeft = options.transientRetries ?? 0;
  let last: unknown;
  for (;;) {
    if (deadline() - Date.now() <= 0)
      throw new ThrottledPastDeadlineError(refusals, Date.now() - began, last);
    const outcome = await tryUntil(attempt, deadline);
    if (outcome.kind === "done") return outcome.value;
    if (outcome.kind === "late") throw new ThrottledPastDeadlineError(refusals, Date.now() - began, last);
    if (transientLeft > 0 && isTransient(outcome.error)) {
      transientLeft -= 1;
      await pause(Math.min(TRANSIENT_WAIT_MS, Math.max(0, deadline() - Date.now())));
      continue;
    }
    if (!isThrottled(outcome.error)) throw outcome.error;
    refusals += 1;
    last = outcome.error;
    options.onThrottled();
    const left = deadline() - Date.now();
    await pause(Math.min(throttledWaitMs(options.random), Math.max(0, left)));
  }
}

type Outcome<T> = { kind: "done"; value: T } | { kind: "failed"; error: unknown } | { kind: "late" };

/** One try, raced against the deadline (re-read when its timer fires, as a renewal may have moved it). */
function tryUntil<T>(
  attempt: (signal: AbortSignal) => Promise<T>,
  deadline: () => number,
): Promise<Outcome<T>> {
  const abort = new AbortController();
  return new Promise<Outcome<T>>((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    const arm = (): void => {
      const left = deadline() - Date.now();
      if (left <= 0) {
        abort.abort();
        return resolve({ kind: "late" });
      }
      timer = setTimeout(arm, left);
    };
    arm();
    let running: Promise<T>;
    try {
      running = attempt(abort.signal);
    } catch (error) {
      running = Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    running.then(
      (value) => resolve({ kind: "done", value }),
      (error: unknown) => resolve({ kind: "failed", error }),
    );
    void running.finally(() => clearTimeout(timer)).catch(() => undefined);
  });
}

/**
 * The message as the SDK settles one without its link (a deferred message's path: update-disposition by lock
 * token over `$management`, with the session id when it has one): the delivery reads as not settled and linkless.
 */
export function byLockToken(message: ServiceBusReceivedMessage): ServiceBusReceivedMessage {
  return Object.create(message, {
    delivery: { value: { remote_settled: false } },
  }) as ServiceBusReceivedMessage;
}

/**
 * The SDK's retry count of `client`: what its constructor kept (`_clientOptions.retryOptions`, not public in
 * @azure/service-bus 7.9.5, hence read defensively); undefined when it cannot be read (another SDK version).
 * Unset means the SDK's default, 3.
 */
export function clientMaxRetries(client: object): number | undefined {
  const options = (client as { _clientOptions?: { retryOptions?: RetryOptions } })._clientOptions;
  if (options === undefined || typeof options !== "object") return undefined;
  return options.retryOptions?.maxRetries ?? 3;
}

/**
 * Why a client given to the worker will spend deliveries when throttled, or undefined when it is one SDK try a
 * call (OWN_RETRY). A client that retries inside the SDK hides ServerBusy from the worker (the SDK's next try comes
 * 30 s later, past the settlement guard's 5 s): each throttled settlement then ends as a redelivery.
 */
export function ownRetryWarning(client: object): string | undefined {
  const maxRetries = clientMaxRetries(client);
  if (maxRetries === 0) return undefined;
  const what =
    maxRetries === undefined
      ? "cannot tell the client's retry options"
      : `the client's retryOptions.maxRetries is ${maxRetries}`;
  return (
    `${what}, not 0: give createWorker a client made with { retryOptions: OWN_RETRY } (exported by sbinbox); ` +
    "otherwise the SDK's own retry hides ServerBusy from the worker and each throttled settlement costs a delivery"
  );
}
