/**
 * Why a message can never succeed. Each reason maps to one settlement: dead-letter, at once,
 * with this reason and a description naming the problem.
 */
export type PoisonReason = "UndecodableBody" | "UnknownMessageType" | "SchemaViolation" | "MessageTooLarge";

export class PoisonMessageError extends Error {
  readonly reason: PoisonReason;
  constructor(reason: PoisonReason, description: string) {
    super(description);
    this.name = "PoisonMessageError";
    this.reason = reason;
  }
}

/** A configuration value that is missing or wrong; the message names the setting. */
export class ConfigError extends Error {
  readonly setting: string;
  constructor(setting: string, problem: string) {
    super(`${setting}: ${problem}`);
    this.name = "ConfigError";
    this.setting = setting;
  }
}

/**
 * The handler errors are recognised by a brand, a registered symbol, not by class identity alone: a team's handlers
 * can load a second copy of this module (a build of the package beside its sources, a bundler, two installs), and
 * its DoNotRetryError must still be one. `instanceof` goes by the brand too, so the worker's checks and a team's
 * own stay the same.
 */
const DO_NOT_RETRY = Symbol.for("sbinbox.DoNotRetryError");
const RETRY_AFTER = Symbol.for("sbinbox.RetryAfterError");

function branded(value: unknown, brand: symbol): boolean {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}

/** A DoNotRetryError from any copy of sbinbox. */
export function isDoNotRetryError(value: unknown): value is DoNotRetryError {
  return branded(value, DO_NOT_RETRY);
}

/** A RetryAfterError from any copy of sbinbox (its `delayMs` checked as this copy checks it). */
export function isRetryAfterError(value: unknown): value is RetryAfterError {
  if (!branded(value, RETRY_AFTER)) return false;
  const delayMs = (value as { delayMs?: unknown }).delayMs;
  return typeof delayMs === "number" && Number.isFinite(delayMs) && delayMs >= 0;
}

/**
 * Thrown by a handler: retry this message after `delayMs` instead of the policy's next delay. It still counts as
 * an attempt, so a handler that keeps asking ends in `RetriesExhausted` like any other.
 */
export class RetryAfterError extends Error {
  readonly delayMs: number;
  declare readonly [RETRY_AFTER]: true;
  constructor(delayMs: number, message = `retry after ${delayMs} ms`, options?: { cause?: unknown }) {
    super(message, options);
    if (!Number.isFinite(delayMs) || delayMs < 0)
      throw new RangeError(`RetryAfterError: delayMs must be a non-negative number (got ${delayMs})`);
    this.name = "RetryAfterError";
    this.delayMs = delayMs;
    Object.defineProperty(this, RETRY_AFTER, { value: true });
  }

  /** By the brand for this class itself, so a copy's instance passes; a subclass keeps the prototype check. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return this === RetryAfterError
      ? isRetryAfterError(value)
      : Function.prototype[Symbol.hasInstance].call(this, value);
  }
}

/** Thrown by a handler: retrying cannot help; the message is dead-lettered at once as `NotRetryable`. */
export class DoNotRetryError extends Error {
  declare readonly [DO_NOT_RETRY]: true;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "DoNotRetryError";
    Object.defineProperty(this, DO_NOT_RETRY, { value: true });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return this === DoNotRetryError
      ? isDoNotRetryError(value)
      : Function.prototype[Symbol.hasInstance].call(this, value);
  }
}
