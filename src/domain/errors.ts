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
