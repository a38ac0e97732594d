/**
 * Every span, attribute and metric name the project emits, in one place.
 * Follows the OpenTelemetry messaging semantic conventions for Azure Service Bus.
 */
import { parseEntity } from "../domain/entity.ts";

export const TRACER_NAME = "sbinbox";
export const METER_NAME = "sbinbox";

export const Attr = {
  messagingSystem: "messaging.system",
  operationName: "messaging.operation.name",
  operationType: "messaging.operation.type",
  destinationName: "messaging.destination.name",
  subscriptionName: "messaging.destination.subscription.name",
  messageId: "messaging.message.id",
  conversationId: "messaging.message.conversation_id",
  deliveryCount: "messaging.servicebus.message.delivery_count",
  dispositionStatus: "messaging.servicebus.disposition_status",
  batchMessageCount: "messaging.batch.message_count",
  errorType: "error.type",
  dbSystem: "db.system.name",
  dbOperation: "db.operation.name",
  dbStatusCode: "db.response.status_code",
  dbQueryText: "db.query.text",
  dbCollection: "db.collection.name",
  /** The project's own: committed, duplicate, poison, failed. */
  outcome: "sbinbox.outcome",
  consumer: "sbinbox.consumer",
  messageType: "sbinbox.message.type",
  deadLetterReason: "sbinbox.dead_letter.reason",
  /** The attempt a process span ended on (1 on the first processing; more after in-place or scheduled retries). */
  attempt: "sbinbox.attempt",
  /** The message's session (its AMQP group-id) on a session-enabled entity. */
  sessionId: "sbinbox.session.id",
  retryDelay: "sbinbox.retry.delay_ms",
  retryOutcome: "sbinbox.retry.outcome",
  /** The dead-lettered message a replayed copy was made from. */
  replayOf: "sbinbox.replay.of",
  /** Which of the inbox's own statements a database span is (insertProcessedMarker, isProcessed, ...). */
  inboxStatement: "sbinbox.inbox.statement",
  /** How many messages of a batch its transaction committed (the rest were duplicates or went alone). */
  batchCommitted: "sbinbox.batch.committed",
  /** Whether a batch's transaction committed (true), or not: none was needed, or it rolled back (false). */
  batchOutcome: "sbinbox.batch.committed_whole",
  /** How a batch ended: committed, all_duplicate, or its failure's reason (deadlock, handler_error, duplicate, other). */
  batchResult: "sbinbox.batch.outcome",
  /** A start-up step (database, serviceBus) and its state while it waits (waiting, unreachable, refused). */
  startupStep: "sbinbox.startup.step",
  startupState: "sbinbox.startup.state",
  /** Whether the worker's connection to Service Bus is heard from (ok) or has gone silent (silent). */
  serviceBusState: "sbinbox.servicebus.state",
} as const;

export const MESSAGING_SYSTEM = "servicebus";

export type Disposition = "complete" | "abandon" | "dead_letter";
export type Outcome = "committed" | "duplicate" | "poison" | "failed";
/** What a failed attempt's retry came to: waited out under the lock, a scheduled copy, or none left. */
export type RetryOutcome = "waited" | "scheduled" | "exhausted";

/** Span events on a process span. */
export const SpanEvent = {
  retryWaited: "sbinbox.retry.waited",
  retryScheduled: "sbinbox.retry.scheduled",
} as const;

export const SpanName = {
  send: (queue: string) => `send ${queue}`,
  /** An outbox enqueue, inside the upstream transaction (the messaging conventions' `create`). */
  create: "create outbox",
  process: (queue: string) => `process ${queue}`,
  settle: (disposition: Disposition, queue: string) => `${disposition} ${queue}`,
  inboxTransaction: "inbox.transaction",
  /** One transaction for several messages (group commit); their process spans link to it. */
  inboxBatch: "inbox.batch",
  inboxInsert: "inbox.insert_marker",
  inboxClaim: "inbox.claim",
  inboxMarkProcessed: "inbox.mark_processed",
  /** The PRODUCER span of a scheduled retry's copy. */
  scheduleRetry: (queue: string) => `schedule ${queue}`,
  /** One SQL statement, named as the database conventions say: operation, then table when known. */
  dbStatement: (operation: string, table?: string) => (table ? `${operation} ${table}` : operation),
} as const;

/** `db.system.name` by dialect, as the database semantic conventions spell them. */
export const DbSystem = {
  postgres: "postgresql",
  sqlserver: "microsoft.sql_server",
} as const;

export const Metric = {
  processDuration: "messaging.process.duration",
  consumedMessages: "messaging.client.consumed.messages",
  outcomes: "sbinbox.messages.outcome",
  dispositions: "sbinbox.messages.disposition",
  duplicatesAbsorbed: "sbinbox.inbox.duplicates",
  settlementFailures: "sbinbox.settlement.failures",
  openClaims: "sbinbox.inbox.open_claims",
  /** Markers deleted by inbox retention, and each pass's duration. */
  cleanupDeleted: "sbinbox.inbox.cleanup.deleted",
  cleanupDuration: "sbinbox.inbox.cleanup.duration",
  outagePause: "sbinbox.database.outage_pause.duration",
  retries: "sbinbox.retries",
  batchSize: "sbinbox.inbox.batch.size",
  outboxLag: "sbinbox.outbox.lag",
  outboxSent: "sbinbox.outbox.sent",
  outboxSetAside: "sbinbox.outbox.set_aside",
  outboxStale: "sbinbox.outbox.stale",
  startupWait: "sbinbox.startup.wait",
  /** 1 while the instance's /readyz would answer 200, else 0: what an alert reads per instance. */
  ready: "sbinbox.ready",
  serviceBusSilence: "sbinbox.servicebus.silence",
  renewalStopMissing: "sbinbox.servicebus.renewal_stop_missing",
  /** Service Bus operations of this process answered ServerBusy (throttled), by operation. */
  throttled: "sbinbox.servicebus.throttled",
} as const;

/**
 * The destination attributes of an entity path: a queue's name, or a subscription's topic and subscription names
 * (the messaging conventions name the topic as the destination and the subscription apart).
 */
export function destinationAttributes(path: string): Record<string, string> {
  const entity = parseEntity(path);
  return entity.kind === "queue"
    ? { [Attr.destinationName]: entity.queue }
    : { [Attr.destinationName]: entity.topic, [Attr.subscriptionName]: entity.subscription };
}

/** The `error.type` attribute's value: the error's code (a driver's or the SDK's), else its name, else "Error". */
export function errorType(error: unknown): string {
  if (error && typeof error === "object") {
    const e = error as { code?: unknown; name?: unknown };
    if (typeof e.code === "string" && e.code !== "") return e.code;
    if (typeof e.name === "string" && e.name !== "") return e.name;
  }
  return "Error";
}
