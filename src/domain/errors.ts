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
 * Thrown by a handler: retry this message after `delayMs` instead of the policy's next delay. It still counts as
 * an attempt, so a handler that keeps asking ends in `RetriesExhausted` like any other.
 */
export class RetryAfterError extends Error {
  readonly delayMs: number;
  constructor(delayMs: number, message = `retry after ${delayMs} ms`, options?: { cause?: unknown }) {
    super(message, options);
    if (!Number.isFinite(delayMs) || delayMs < 0)
      throw new RangeError(`RetryAfterError: delayMs must be a non-negative number (got ${delayMs})`);
    this.name = "RetryAfterError";
    this.delayMs = delayMs;
  }
}

/** Thrown by a handler: retrying cannot help; the message is dead-lettered at once as `NotRetryable`. */
export class DoNotRetryError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "DoNotRetryError";
  }
}
