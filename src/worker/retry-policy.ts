import { DoNotRetryError, RetryAfterError } from "../domain/errors.ts";
import type { ErrorClass } from "../domain/outcome.ts";
import type { FailureSource } from "../domain/settlement.ts";
import { NETWORK_ERROR_CODES } from "../inbox/network-errors.ts";

/**
 * Which failures are retried, after how long, and where the wait happens. Data and pure functions only: the worker
 * applies the verdict, whatever way the message was processed.
 */
export interface RetryPolicy {
  /** One delay per retry of a `transient` failure; the length is the number of retries. */
  readonly transientDelaysMs: readonly number[];
  /** The same for a `permanent` failure (a bug, a constraint violation in the handler): few or none. */
  readonly permanentDelaysMs: readonly number[];
  /**
   * The same for a `permanent` failure that is a missing table or column (statement-faults.ts, `awaitsMigration`):
   * a schema whose migration another process is still applying. Bounded, so a handler that names a table that
   * will never exist is dead-lettered within minutes. Default DEFAULT_MIGRATION_DELAYS_MS.
   */
  readonly migrationDelaysMs?: readonly number[];
  /** Each delay is drawn uniformly from delay x [1 - jitter, 1 + jitter]; 0 turns jitter off. */
  readonly jitter: number;
  /**
   * Longest delay waited out in the worker on the same delivery; a waiting message keeps its concurrency slot. A
   * listed delay up to this is waited in place with its jittered value capped here, so jitter never turns a
   * delay the operator sized to wait in place into a scheduled copy.
   */
  readonly maxInProcessWaitMs: number;
  /**
   * Lock time kept in hand after an in-process wait, for the settlement; the failed attempt's own duration is
   * added to it, since the retry is likely to take as long again.
   */
  readonly lockMarginMs: number;
}

/**
 * 1 s, 5 s, 30 s in place, then copies after 2, 10, 30 and 60 min: 6,156 s (102.6 min) in all, 82.1 to 123.1 min
 * with the 20% jitter, so a downstream outage of up to 82 minutes is always ridden out. Each copy is a new message
 * with the queue's full TTL (14 days in the templates), so the longest single delay (72 min) is what must stay
 * under it, and the whole tail stays under it too.
 */
export const DEFAULT_TRANSIENT_DELAYS_MS = [
  1_000, 5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000,
] as const;
export const DEFAULT_PERMANENT_DELAYS_MS = [5_000] as const;
/**
 * 5 s and 30 s in place, then copies after 2 and 10 min: 755 s (12.6 min), 10.1 to 15.1 min with the jitter, longer
 * than the post-provision step of a deployment waits before it migrates (up to 10 minutes, docs/deploy.md).
 */
export const DEFAULT_MIGRATION_DELAYS_MS = [5_000, 30_000, 120_000, 600_000] as const;

export const defaultRetryPolicy: RetryPolicy = {
  transientDelaysMs: DEFAULT_TRANSIENT_DELAYS_MS,
  permanentDelaysMs: DEFAULT_PERMANENT_DELAYS_MS,
  migrationDelaysMs: DEFAULT_MIGRATION_DELAYS_MS,
  jitter: 0.2,
  maxInProcessWaitMs: 30_000,
  lockMarginMs: 10_000,
};

export interface RetryInput {
  /** The attempt that just failed, 1 for the first processing of a message. */
  readonly attempt: number;
  readonly errorClass: "transient" | "permanent";
  readonly error: unknown;
  /** A `permanent` failure that is a missing table or column: retried on the migration schedule. */
  readonly awaitsMigration?: boolean;
  /** The handler and statement the failure is of, for the dead-letter description. */
  readonly source?: FailureSource;
  /**
   * How long this delivery's lock can still be held: until the SDK stops renewing it (or, with renewal off, until
   * it expires). Undefined when unknown, which forbids an in-process wait.
   */
  readonly lockRemainingMs: number | undefined;
  /**
   * How long the attempt that just failed ran (ms); the retry is expected to need as long again under the lock.
   * Undefined counts as 0.
   */
  readonly attemptDurationMs?: number;
  /** A number in [0, 1); Math.random in the worker, fixed in tests. */
  readonly random: number;
}

export type RetryVerdict =
  /** Wait `delayMs` here, under the lock, and process again as attempt `attempt` on the same delivery. */
  | { readonly action: "wait"; readonly attempt: number; readonly delayMs: number }
  /** Schedule a copy of the message `delayMs` from now as attempt `attempt`, then complete this delivery. */
  | { readonly action: "schedule"; readonly attempt: number; readonly delayMs: number }
  /** Dead-letter: no retry left, or the handler said retrying cannot help. */
  | {
      readonly action: "dead_letter";
      readonly reason: "RetriesExhausted" | "NotRetryable";
      readonly description: string;
    };

/**
 * The class a failure is retried as. The store's class stands for the database's own errors (they carry a SQLSTATE
 * or an error number) and for `transient`. A handler's other errors are judged here: a JavaScript bug (TypeError,
 * ReferenceError, SyntaxError, RangeError) with no network cause is permanent, as are an HTTP 4xx other than 408,
 * 429 and a 409 with code `idempotency_key_in_use`, and DoNotRetryError; anything else (a network code anywhere in the cause chain, an HTTP 408, 429 or 5xx,
 * a timeout, a plain Error from a downstream call) is transient, because a downstream that is down is the common case and burning it after one retry is the harm.
 */
export function retryClass(error: unknown, storeClass: "transient" | "permanent"): "transient" | "permanent" {
  if (error instanceof DoNotRetryError) return "permanent";
  if (error instanceof RetryAfterError || storeClass === "transient") return "transient";
  if (isDatabaseError(error)) return storeClass;
  const cause = httpOrNetworkCause(error);
  if (cause !== undefined) return cause;
  if (error instanceof Error && BUG_NAMES.has(error.name)) return "permanent";
  return "transient";
}

/**
 * The error code (on the error's `code`, next to its `status` 409) that marks "a call with this idempotency key is
 * still in progress": retried as transient, unlike other 409s.
 */
export const IDEMPOTENCY_KEY_IN_USE = "idempotency_key_in_use";

const BUG_NAMES = new Set(["TypeError", "ReferenceError", "SyntaxError", "RangeError", "ZodError"]);

/**
 * mssql's codes for a request it refuses before sending it, over what the caller gave (a parameter value its type
 * cannot take, bad arguments): the handler's mistake, the same on every attempt, so the store's class stands.
 */
const DRIVER_REFUSAL_CODES = new Set(["EPARAM", "EARGS", "EINJECT", "EDUPEPARAM"]);

function isDatabaseError(error: unknown): boolean {
  if (!error || typeof error !== "object") return false;
  const e = error as { code?: unknown; number?: unknown; sqlState?: unknown };
  // PostgreSQL's SQLSTATE (five characters), SQL Server's error number, a driver's refusal of the request.
  return (
    (typeof e.code === "string" && (/^[0-9A-Z]{5}$/.test(e.code) || DRIVER_REFUSAL_CODES.has(e.code))) ||
    typeof e.number === "number"
  );
}

function httpOrNetworkCause(error: unknown): "transient" | "permanent" | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current && typeof current === "object"; depth += 1) {
    const e = current as {
      code?: unknown;
      status?: unknown;
      statusCode?: unknown;
      name?: unknown;
      cause?: unknown;
    };
    if (typeof e.code === "string" && (NETWORK_ERROR_CODES.has(e.code) || e.code.startsWith("UND_ERR_")))
      return "transient";
    const status = typeof e.status === "number" ? e.status : e.statusCode;
    if (typeof status === "number" && status >= 400) {
      // An idempotency-key API answers 409 with this code while an earlier call with the same key is still running
      // (Stripe does): the call is refused for now, not for good, and a two-phase handler's retry after a timeout
      // lands in exactly that window, so dead-lettering it would burn a message whose effect is being made.
      if (status === 409 && e.code === IDEMPOTENCY_KEY_IN_USE) return "transient";
      // A request the downstream refuses as such (400, 404, 422...) fails the same way next time.
      return status >= 500 || status === 408 || status === 429 ? "transient" : "permanent";
    }
    if (e.name === "TimeoutError" || e.name === "AbortError") return "transient";
    current = e.cause;
  }
  return undefined;
}

/** The verdict for one failed attempt. */
export function decideRetry(policy: RetryPolicy, input: RetryInput): RetryVerdict {
  const { attempt, error } = input;
  if (error instanceof DoNotRetryError) {
    return {
      action: "dead_letter",
      reason: "NotRetryable",
      description: describeFailure(attempt, input.errorClass, error, input.source),
    };
  }
  const delays = scheduleOf(policy, input);
  const retry = attempt; // the first retry follows attempt 1 and uses delays[0]
  if (retry > delays.length) {
    return {
      action: "dead_letter",
      reason: "RetriesExhausted",
      description: describeFailure(attempt, input.errorClass, error, input.source),
    };
  }
  const base = error instanceof RetryAfterError ? error.delayMs : delays[retry - 1]!;
  const drawn = jittered(base, policy.jitter, input.random);
  const next = attempt + 1;
  if (base > policy.maxInProcessWaitMs || input.lockRemainingMs === undefined)
    return { action: "schedule", attempt: next, delayMs: drawn };
  const inPlace = Math.min(drawn, policy.maxInProcessWaitMs);
  // The lock must outlast the wait, the retry (about as long as the attempt that failed) and the settlement.
  const needed = inPlace + Math.max(0, input.attemptDurationMs ?? 0) + policy.lockMarginMs;
  return needed <= input.lockRemainingMs
    ? { action: "wait", attempt: next, delayMs: inPlace }
    : { action: "schedule", attempt: next, delayMs: drawn };
}

/** The delay list a failure is retried on: by its class, and for a missing table or column the migration list. */
function scheduleOf(policy: RetryPolicy, input: RetryInput): readonly number[] {
  if (input.errorClass === "transient") return policy.transientDelaysMs;
  if (input.awaitsMigration === true) return policy.migrationDelaysMs ?? DEFAULT_MIGRATION_DELAYS_MS;
  return policy.permanentDelaysMs;
}

export function jittered(delayMs: number, jitter: number, random: number): number {
  if (jitter <= 0 || delayMs <= 0) return Math.round(delayMs);
  return Math.max(0, Math.round(delayMs * (1 - jitter + 2 * jitter * random)));
}

/**
 * The dead-letter description: the attempt count, the error's class, name and message, and where it happened (the
 * handler, the statement the database refused), never the body or a statement's parameters. Error messages from
 * drivers can quote values; the handler's own errors are the handler author's to keep clean.
 */
export function describeFailure(
  attempt: number,
  errorClass: ErrorClass,
  error: unknown,
  source?: FailureSource,
): string {
  const name = error instanceof Error ? error.name : typeof error;
  const message = error instanceof Error ? error.message : String(error);
  const where =
    source === undefined
      ? ""
      : ` (handler "${source.handler}"${source.statement === undefined ? "" : `, statement "${source.statement}"`})`;
  const head = `after ${attempt} attempt${attempt === 1 ? "" : "s"}: ${errorClass} ${name}: `;
  // At most 1,024 characters; a long message is cut short before where it happened is.
  const room = 1024 - head.length - where.length;
  const text = message.length > room ? `${message.slice(0, Math.max(0, room - 3))}...` : message;
  return `${head}${text}${where}`.slice(0, 1024);
}

/** The total time a message can spend retrying on a delay list, without jitter. */
export function scheduleSpanMs(delays: readonly number[]): number {
  return delays.reduce((a, b) => a + b, 0);
}
