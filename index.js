// The package's entry. Installed, it is dist/index.js. In this checkout (where handlers/ imports "sbinbox" by name)
// it is the TypeScript source, the same modules bin/sbinbox.js runs: so a team's handlers and the worker share one
// copy of every class (DoNotRetryError above all) and nothing needs building first. The names are listed because
// `export *` cannot be conditional; test/packages/root-entry.test.ts checks the list against src/index.ts.
import { existsSync } from "node:fs";

const source = new URL("./src/index.ts", import.meta.url);
const inCheckout = !import.meta.url.includes("/node_modules/") && existsSync(source);
const lib = await import(inCheckout ? source.href : "./dist/index.js");

export const {
  ConfigError,
  CopyProperty,
  DEFAULT_RELAY_SETTINGS,
  DoNotRetryError,
  FakeMailer,
  HandlerRegistry,
  IDEMPOTENCY_KEY_IN_USE,
  MESSAGE_ID_NAMESPACE,
  OWN_RETRY,
  OutboxStore,
  PoisonMessageError,
  ResendWindowError,
  RetryAfterError,
  StartupAbortedError,
  StartupFailedError,
  TYPE_PROPERTY,
  accountCreditedHandler,
  canonicalName,
  checkRelaySettings,
  createInboxStore,
  createLogger,
  createOutboxSender,
  createPublisher,
  createServiceBusClient,
  createWorker,
  decideRetry,
  decodeMessage,
  defaultRetryPolicy,
  deriveMessageId,
  enqueue,
  exampleHandlers,
  isDoNotRetryError,
  isRetryAfterError,
  loadConfig,
  loadHandlerModule,
  migrate,
  openDatabase,
  openOutboxStore,
  placeholderMismatch,
  replayDeadLetters,
  resolveStatements,
  retryClass,
  retryStartupStep,
  settings,
  silentLogger,
  startApp,
  startRelay,
  startTelemetry,
  startWhenReachable,
  toServiceBusMessage,
  uuidV5,
  welcomeEmailHandler,
} = lib;
