/**
 * How the database classified an error. Decided from structured fields (error number, SQLSTATE,
 * constraint name), never from message text alone.
 * - duplicate: the inbox marker's own unique index rejected the insert: someone already did the work.
 * - unavailable: the database cannot be reached; stop taking messages until it answers again.
 * - transient: worth retrying soon (deadlock, serialization failure, throttling).
 * - permanent: anything else, including a unique violation on a business table.
 */
export type ErrorClass = "duplicate" | "unavailable" | "transient" | "permanent";

/** The result of running one message through the inbox transaction. */
export type ProcessOutcome =
  | { readonly kind: "committed" }
  | { readonly kind: "duplicate" }
  | {
      readonly kind: "failed";
      readonly error: unknown;
      readonly errorClass: Exclude<ErrorClass, "duplicate">;
    };

/** The result of phase 1 of a two-phase claim. */
export type ClaimOutcome =
  /** This caller holds the claim and must perform the effect, then mark it processed. */
  | { readonly kind: "claimed" }
  /** The effect is already recorded as done. */
  | { readonly kind: "duplicate" }
  /** Another claimant holds an open, fresh claim: leave the message for a later delivery. */
  | { readonly kind: "busy" }
  | {
      readonly kind: "failed";
      readonly error: unknown;
      readonly errorClass: Exclude<ErrorClass, "duplicate">;
    };
