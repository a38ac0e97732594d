import type { PoisonReason } from "./errors.ts";
import type { ErrorClass } from "./outcome.ts";

/** Why a message that was not poison was dead-lettered: its retries ran out, or its handler said not to retry. */
export type RetryReason = "RetriesExhausted" | "NotRetryable";

export type DeadLetterReason = PoisonReason | RetryReason;

/** A copy of the message to schedule before the original is completed: a retry that does not fit under the lock. */
export interface ScheduledCopy {
  /** Derived from the original inbox key, the replay number and the attempt: the same retry always has the same id. */
  readonly messageId: string;
  readonly enqueueAt: Date;
  readonly attempt: number;
  /** Written over the original's application properties (the copy properties of the envelope). */
  readonly properties: Readonly<Record<string, string | number>>;
}

/**
 * Where a failure happened, for its log line and dead-letter description: the handler (by its message type) and,
 * when the database refused one of the handler's statements, that statement's text (never its parameters).
 */
export interface FailureSource {
  readonly handler: string;
  readonly statement?: string;
}

/** What the worker decided for one message; src/servicebus turns it into the broker call. */
export type Decision =
  | { readonly disposition: "complete"; readonly outcome: "committed" | "duplicate" }
  | {
      readonly disposition: "dead_letter";
      readonly outcome: "poison" | "failed";
      readonly reason: DeadLetterReason;
      readonly description: string;
    }
  | {
      readonly disposition: "abandon";
      readonly outcome: "failed";
      readonly error: unknown;
      readonly errorClass: Exclude<ErrorClass, "duplicate">;
      readonly source?: FailureSource;
    }
  | {
      /** Send `copy` scheduled for later, then complete this delivery; abandon it if the send fails. */
      readonly disposition: "reschedule";
      readonly outcome: "failed";
      readonly error: unknown;
      readonly errorClass: Exclude<ErrorClass, "duplicate">;
      readonly copy: ScheduledCopy;
      readonly source?: FailureSource;
    };
