import type { InboxKey } from "./store.ts";

/**
 * `markProcessed` found no open claim of its own: the sweeper made it retryable (and perhaps another claimant
 * took it). The external effect may run again under the same idempotency key; the caller must not settle the
 * message as if its claim had been recorded.
 */
export class ClaimLostError extends Error {
  readonly messageId: string;
  readonly consumer: string;
  constructor(key: InboxKey, claimId: string | undefined) {
    super(
      `inbox claim for message "${key.messageId}" (consumer "${key.consumer}")` +
        `${claimId === undefined ? "" : ` with claim id ${claimId}`} is no longer open`,
    );
    this.name = "ClaimLostError";
    this.messageId = key.messageId;
    this.consumer = key.consumer;
  }
}
