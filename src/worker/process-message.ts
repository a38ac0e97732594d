import { decodeMessage, type HandlerRegistry, type IncomingMessage } from "../domain/envelope.ts";
import { PoisonMessageError } from "../domain/errors.ts";
import type { MessageContext } from "../domain/handler.ts";
import type { ErrorClass } from "../domain/outcome.ts";
import type { Decision } from "../domain/settlement.ts";
import type { InboxStore } from "../inbox/store.ts";

export interface ProcessMessageDeps {
  readonly store: InboxStore;
  readonly registry: HandlerRegistry;
  readonly consumer: string;
  readonly maxMessageBytes: number;
}

/** A claim another claimant holds open: not an error of this message, so it is retried later. */
export class ClaimBusyError extends Error {
  constructor(messageId: string) {
    super(`message ${messageId} is claimed by another instance that has not finished`);
    this.name = "ClaimBusyError";
  }
}

type Decided = Decision & { readonly messageType?: string };

/**
 * Decides what becomes of one message, settlement following from the outcome alone:
 * poison -> dead-letter at once; committed or duplicate -> complete; anything else -> abandon.
 * It never throws.
 */
export async function processMessage(message: IncomingMessage, deps: ProcessMessageDeps): Promise<Decided> {
  let decoded;
  try {
    if (message.messageId === "") {
      throw new PoisonMessageError(
        "UndecodableBody",
        "the message has no MessageId, so the inbox cannot key it",
      );
    }
    decoded = decodeMessage(message, deps.registry, deps.maxMessageBytes);
  } catch (error) {
    if (error instanceof PoisonMessageError) {
      return {
        disposition: "dead_letter",
        outcome: "poison",
        reason: error.reason,
        description: error.message,
      };
    }
    return failed(error, "permanent");
  }
  const key = { messageId: message.messageId, consumer: deps.consumer };
  const context: MessageContext = {
    messageId: message.messageId,
    consumer: deps.consumer,
    type: decoded.type,
    deliveryCount: message.deliveryCount,
    correlationId: message.correlationId,
    enqueuedTime: message.enqueuedTime,
    applicationProperties: message.applicationProperties,
  };
  const { handler, body, type } = decoded;
  if (handler.kind === "transactional") {
    const outcome = await deps.store.process(key, (tx) => handler.handle(body, tx, context));
    if (outcome.kind === "failed") return { ...failed(outcome.error, outcome.errorClass), messageType: type };
    return { disposition: "complete", outcome: outcome.kind, messageType: type };
  }
  // Two-phase: claim and commit, perform the external effect keyed by the MessageId, then mark it processed.
  const claim = await deps.store.claim(key);
  switch (claim.kind) {
    case "duplicate":
      return { disposition: "complete", outcome: "duplicate", messageType: type };
    case "busy":
      return { ...failed(new ClaimBusyError(message.messageId), "transient"), messageType: type };
    case "failed":
      return { ...failed(claim.error, claim.errorClass), messageType: type };
    case "claimed":
      break;
  }
  try {
    await handler.perform(body, { ...context, idempotencyKey: message.messageId });
  } catch (error) {
    // The claim stays open; the sweeper makes it retryable, and the external system dedupes by the key.
    return { ...failed(error, "transient"), messageType: type };
  }
  try {
    await deps.store.markProcessed(key, claim.claimId);
  } catch (error) {
    return { ...failed(error, safeClassify(deps.store, error)), messageType: type };
  }
  return { disposition: "complete", outcome: "committed", messageType: type };
}

function failed(error: unknown, errorClass: Exclude<ErrorClass, "duplicate">): Decision {
  return { disposition: "abandon", outcome: "failed", error, errorClass };
}

function safeClassify(store: InboxStore, error: unknown): Exclude<ErrorClass, "duplicate"> {
  try {
    const c = store.classify(error);
    return c === "duplicate" ? "permanent" : c;
  } catch {
    return "permanent";
  }
}
