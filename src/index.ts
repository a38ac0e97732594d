/**
 * sbinbox as a library. Upstream services use the publisher; consumers register handlers and run the worker.
 * Nothing here runs at import time.
 */
export { createPublisher, ResendWindowError, toServiceBusMessage } from "./servicebus/publisher.ts";
export type { Publisher, PublisherOptions, PublishEvent, PublishResult } from "./servicebus/publisher.ts";
export { deriveMessageId, canonicalName, uuidV5, MESSAGE_ID_NAMESPACE } from "./servicebus/message-id.ts";
export { createServiceBusClient, type ServiceBusTarget } from "./servicebus/client.ts";
// The retry options of a client given to createWorker: one SDK try a call, the worker retrying ServerBusy itself.
export { OWN_RETRY } from "./servicebus/throttling.ts";

export { createWorker } from "./worker/worker.ts";
export type { Worker, WorkerOptions, WorkerStats, Readiness } from "./worker/worker.ts";
export { startApp, type App, type AppOptions } from "./app/app.ts";
export {
  startWhenReachable,
  retryStartupStep,
  StartupAbortedError,
  StartupFailedError,
  type StartupStep,
  type StartupWaitOptions,
  type StartupFailureKind,
} from "./app/startup.ts";
export { openDatabase, type Database } from "./app/database.ts";
export { loadConfig, settings, type Config } from "./config/index.ts";

export { HandlerRegistry, decodeMessage, TYPE_PROPERTY, CopyProperty } from "./domain/envelope.ts";
export type { IncomingMessage, DecodedMessage } from "./domain/envelope.ts";
export type {
  MessageHandler,
  TransactionalHandler,
  StatementsHandler,
  Statement,
  TwoPhaseHandler,
  MessageContext,
} from "./domain/handler.ts";
export { resolveStatements } from "./worker/statements.ts";
export { placeholderMismatch } from "./inbox/placeholders.ts";
export type { BoundStatement } from "./inbox/store.ts";
export type { SqlExecutor, SqlResult, Dialect, DialectSql } from "./domain/sql.ts";
export type { HandlerModule } from "./domain/handler-module.ts";
export { loadHandlerModule } from "./app/handler-module.ts";
export { migrate, type MigrateOptions, type MigrateResult } from "./app/migrate.ts";
export type { Decision } from "./domain/settlement.ts";
export {
  PoisonMessageError,
  ConfigError,
  RetryAfterError,
  DoNotRetryError,
  isDoNotRetryError,
  isRetryAfterError,
  type PoisonReason,
} from "./domain/errors.ts";
export {
  defaultRetryPolicy,
  decideRetry,
  IDEMPOTENCY_KEY_IN_USE,
  retryClass,
  type RetryPolicy,
} from "./worker/retry-policy.ts";

export { createInboxStore, type InboxStore, type InboxStoreConfig } from "./inbox/index.ts";
export { exampleHandlers, accountCreditedHandler, welcomeEmailHandler, FakeMailer } from "./example/index.ts";
export { createLogger, silentLogger, type Logger } from "./telemetry/logger.ts";
export { startTelemetry, type Telemetry, type TelemetryOptions } from "./telemetry/setup.ts";

export { enqueue, type OutboxEvent, type OutboxTransaction, type EnqueueResult } from "./outbox/enqueue.ts";
export { startRelay, checkRelaySettings, DEFAULT_RELAY_SETTINGS } from "./outbox/relay.ts";
export type { Relay, RelayOptions, RelaySettings, RelayCounters } from "./outbox/relay.ts";
export { OutboxStore, type OutboxStatus } from "./outbox/store.ts";
// The dialect stores load their driver only when opened, as openDatabase does.
export { openOutboxStore } from "./outbox/open.ts";
export { createOutboxSender, type OutboxSender, type SendReport } from "./servicebus/outbox-sender.ts";
// What `sbinbox dlq replay` runs, for a program of a team's own (and the test harness's `replay`).
export { replayDeadLetters, type DeadLetter, type ReplayResult } from "./servicebus/dead-letter.ts";
