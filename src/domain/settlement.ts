import type { PoisonReason } from "./errors.ts";
import type { ErrorClass } from "./outcome.ts";

/** What the worker decided for one message; src/servicebus turns it into the broker call. */
export type Decision =
  | { readonly disposition: "complete"; readonly outcome: "committed" | "duplicate" }
  | {
      readonly disposition: "dead_letter";
      readonly outcome: "poison";
      readonly reason: PoisonReason;
      readonly description: string;
    }
  | {
      readonly disposition: "abandon";
      readonly outcome: "failed";
      readonly error: unknown;
      readonly errorClass: Exclude<ErrorClass, "duplicate">;
    };
