import type { Logger } from "../telemetry/logger.ts";
import { startupMetrics } from "../telemetry/startup-metrics.ts";

/**
 * Why a start-up step failed. `unreachable`: the database or broker cannot be reached or is not serving yet (an
 * outage, a failover, a server still starting); waited for without limit, as a running worker waits. `refused`:
 * it answered and said no (a login refused, a missing database or queue, no permission); such a refusal can
 * clear (an Entra role assignment still propagating, a user created after the deployment), so it is retried too,
 * but only for the start-up limit.
 */
export type StartupFailureKind = "unreachable" | "refused";

/** A component's state on /readyz while the process starts: no error text, only which way it fails. */
export type StartupState = "waiting" | StartupFailureKind | "ok";

export interface StartupStep<T> {
  /** Names the component in logs, on /readyz and in the failure message: "database", "serviceBus". */
  readonly name: string;
  /** One try; it may throw. `signal` aborts when the process is asked to stop. */
  attempt(signal: AbortSignal): Promise<T>;
  classify(error: unknown): StartupFailureKind;
}

export interface StartupWaitOptions {
  /** First wait after a failure, doubled after each further failure up to `backoffMaxMs`. */
  readonly backoffMinMs: number;
  readonly backoffMaxMs: number;
  /** How long an unbroken run of refusals is retried before start-up fails; 0 fails on the first. */
  readonly refusedLimitMs: number;
  readonly signal?: AbortSignal;
  readonly logger: Logger;
  /** Each change of a step's state, for /readyz. */
  readonly onState?: (step: string, state: StartupState) => void;
}

/** A step kept refusing for longer than the start-up limit: the process exits 1 with this message. */
export class StartupFailedError extends Error {
  readonly step: string;
  constructor(step: string, refusedForMs: number, cause: unknown) {
    super(
      `${step} refused start-up for ${Math.round(refusedForMs / 1000)} s ` +
        `(SBINBOX_STARTUP_LIMIT_MS): ${describe(cause)}`,
      { cause },
    );
    this.name = "StartupFailedError";
    this.step = step;
  }
}

/** The process was asked to stop while it waited: not a failure, it exits 0. */
export class StartupAbortedError extends Error {
  constructor() {
    super("start-up aborted: stop requested while waiting for the database or Service Bus");
    this.name = "StartupAbortedError";
  }
}

/**
 * Retries one start-up step with bounded exponential back-off until it succeeds, fails for good (a refusal
 * longer than the limit), or the signal aborts. Shared by every long-running command (worker, relay).
 */
export async function retryStartupStep<T>(step: StartupStep<T>, options: StartupWaitOptions): Promise<T> {
  const { logger, signal } = options;
  const began = Date.now();
  let wait = options.backoffMinMs;
  let refusedSince: number | undefined;
  let lastKind: StartupFailureKind | undefined;
  options.onState?.(step.name, "waiting");
  // The gauge that makes an endless wait visible (see startupMetrics), reported until the step ends, however.
  const stopObserving = startupMetrics.observeWait(step.name, () => ({
    waitedMs: Date.now() - began,
    state: lastKind ?? "waiting",
  }));
  try {
    for (let attempt = 1; ; attempt += 1) {
      if (signal?.aborted) throw new StartupAbortedError();
      try {
        const result = await untilAborted(step.attempt(signal ?? new AbortController().signal), signal);
        options.onState?.(step.name, "ok");
        if (attempt > 1)
          logger.info(`${step.name} reached`, { attempts: attempt, waitedMs: Date.now() - began });
        return result;
      } catch (error) {
        if (error instanceof StartupAbortedError || signal?.aborted) throw new StartupAbortedError();
        const kind = step.classify(error);
        const now = Date.now();
        refusedSince = kind === "refused" ? (refusedSince ?? now) : undefined;
        if (refusedSince !== undefined && now - refusedSince >= options.refusedLimitMs) {
          options.onState?.(step.name, kind);
          throw new StartupFailedError(step.name, now - refusedSince, error);
        }
        options.onState?.(step.name, kind);
        // The first failure and every change of kind are worth a warning; the repeats are progress, at info.
        const fields = { attempt, kind, nextAttemptMs: wait, error };
        if (kind !== lastKind) logger.warn(`${step.name} ${kind} at start-up: retrying`, fields);
        else logger.info(`${step.name} still ${kind}`, fields);
        lastKind = kind;
        await sleep(wait, signal);
        wait = Math.min(wait * 2, options.backoffMaxMs);
      }
    }
  } finally {
    stopObserving();
  }
}

/** Rejects with StartupAbortedError as soon as the signal aborts, without waiting for the attempt to give up. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(new StartupAbortedError());
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(new StartupAbortedError());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function describe(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) {
    return error.errors.map(describe).join("; ");
  }
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === "string" && !error.message.includes(code)
      ? `${error.message} (${code})`
      : error.message;
  }
  return String(error);
}

/**
 * Runs the steps side by side, each with its own back-off, and resolves with their results once all have
 * succeeded. The first step to fail for good stops the others and its error is thrown.
 */
export async function startWhenReachable<T extends readonly unknown[]>(
  steps: { readonly [K in keyof T]: StartupStep<T[K]> },
  options: StartupWaitOptions,
): Promise<T> {
  const controller = new AbortController();
  const onAbort = (): void => controller.abort();
  options.signal?.addEventListener("abort", onAbort, { once: true });
  if (options.signal?.aborted) controller.abort();
  let failure: unknown;
  try {
    const results = await Promise.all(
      steps.map((step: StartupStep<unknown>) =>
        retryStartupStep(step, { ...options, signal: controller.signal }).catch((error: unknown) => {
          // The first real failure wins; the others then end as aborted.
          if (failure === undefined && !(error instanceof StartupAbortedError)) failure = error;
          controller.abort();
          throw error;
        }),
      ),
    );
    return results as unknown as T;
  } catch (error) {
    throw failure ?? error;
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
  }
}
