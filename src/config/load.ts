import { readFileSync } from "node:fs";
import { ConfigError } from "../domain/errors.ts";
import { checkRelaySettings, type RelaySettings } from "../outbox/settings.ts";
import { checkEntityConflicts } from "./rules.ts";
import { parsers, settings, type BenchLayer, type RawSettings, type SettingName } from "./schema.ts";
import { DEFAULT_CLEANUP_BATCH, type PreCheckMode } from "../inbox/core.ts";
import type { CleanupPace } from "../inbox/cleanup-pace.ts";

export type ServiceBusConnection =
  | { readonly kind: "connection-string"; readonly connectionString: string }
  | { readonly kind: "namespace"; readonly fullyQualifiedNamespace: string }
  /** Nothing configured: the process starts the local broker itself. */
  | { readonly kind: "embedded" };

export type DatabaseConnection =
  | { readonly kind: "postgres"; readonly url: string }
  | { readonly kind: "sqlserver"; readonly connectionString: string }
  /** Entra ID token authentication through @azure/identity; no password anywhere. */
  | { readonly kind: "sqlserver-entra"; readonly server: string; readonly database: string }
  /** Nothing configured: the process starts an embedded PostgreSQL itself. */
  | { readonly kind: "embedded" };

/** A database to connect to: any but the embedded one, which the process starts itself. */
export type DatabaseTarget = Exclude<DatabaseConnection, { kind: "embedded" }>;

export interface Config {
  readonly serviceBus: ServiceBusConnection;
  readonly database: DatabaseConnection;
  /** The schema of the inbox's tables; undefined: the dialect's default (dbo, public). */
  readonly inboxSchema?: string;
  /**
   * What the worker and `sbinbox dlq` receive from (a queue), and for `publish` and the relay what they send to (a
   * queue or a topic).
   */
  readonly queue: string;
  readonly consumer: string;
  /** SBINBOX_HANDLERS: the handler module; the built-in example when absent. */
  readonly handlersModule?: string;
  readonly maxConcurrentCalls: number;
  /** Session mode when above 0 (SBINBOX_MAX_CONCURRENT_SESSIONS). */
  readonly maxConcurrentSessions: number;
  readonly maxAutoLockRenewalMs: number;
  /** SBINBOX_QUEUE_LOCK_DURATION_MS: the queue's LockDuration (retention check, settlement bound). */
  readonly lockDurationMs: number;
  readonly precheck: PreCheckMode;
  /** A number, or "auto" (the worker's rule: createBatcher in src/worker/worker.ts). */
  readonly batchSize: number | "auto";
  readonly batchWaitMs: number;
  readonly batchMaxInFlight: number;
  readonly maxMessageBytes: number;
  readonly gracePeriodMs: number;
  /** When /readyz reports the Service Bus link silent (src/worker/progress.ts). */
  readonly progress: ProgressSettings;
  readonly retentionMs: number;
  readonly cleanupIntervalMs: number;
  /** SBINBOX_CLEANUP_PAUSE_MS: a fixed pause between retention batches, replacing the pace; unset: the pace. */
  readonly cleanupPauseMs?: number;
  /** SBINBOX_CLEANUP_RATE_MULTIPLE and SBINBOX_CLEANUP_MIN_RATE: how fast retention deletes. */
  readonly cleanupPace: CleanupPace;
  /** SBINBOX_CLEANUP_BATCH_ROWS: rows a retention statement reads by the key. */
  readonly cleanupBatchRows: number;
  readonly claimTimeoutMs: number;
  readonly sweepIntervalMs: number;
  readonly outageBackoffMinMs: number;
  readonly outageBackoffMaxMs: number;
  readonly databaseTimeouts: DatabaseTimeouts;
  readonly retry: RetrySettings;
  readonly startupLimitMs: number;
  readonly logLevel: "debug" | "info" | "warn" | "error";
  readonly faultKillAfterCommit?: string;
  readonly faultKillAfterSend?: string;
  /** Layers switched off for the CPU benchmark's ledger only (SBINBOX_BENCH_LAYERS_OFF); empty in any real run. */
  readonly benchLayersOff: readonly BenchLayer[];
  readonly port: number;
  readonly httpHost: string;
  readonly applicationInsightsConnectionString?: string;
  readonly serviceName: string;
  /** The outbox relay's settings; checked against the duplicate-detection window when loaded for the relay. */
  readonly relay: RelaySettings;
}

/** Bounds on every database wait: a database that stops answering ends in an error, never in a hang. */
export interface DatabaseTimeouts {
  readonly connectMs: number;
  readonly statementMs: number;
  readonly idleInTransactionMs: number;
  readonly keepAliveMs: number;
  readonly probeMs: number;
}

/** The retry policy's settings (src/worker/retry-policy.ts). */
export interface RetrySettings {
  readonly transientDelaysMs: readonly number[];
  readonly permanentDelaysMs: readonly number[];
  readonly migrationDelaysMs: readonly number[];
  readonly jitter: number;
  readonly maxInProcessWaitMs: number;
}

export interface LoadOptions {
  env?: NodeJS.ProcessEnv;
  /** `publish` needs Service Bus only: no database settings are required or checked. */
  purpose?: "worker" | "publish" | "relay" | "dlq";
  readFile?: (path: string) => string;
}

const HOUR_MS = 3_600_000;

/** Reads every setting once, validates it, and fails with a ConfigError naming the first bad setting. */
export function loadConfig(options: LoadOptions = {}): Config {
  const env = options.env ?? process.env;
  const readFile = options.readFile ?? ((path: string) => readFileSync(path, "utf8"));
  const raw = { ...readConfigFile(env.SBINBOX_CONFIG_FILE, readFile), ...pickEnv(env) };
  const s = parseAll(raw);
  return {
    serviceBus:
      options.purpose === "publish" || options.purpose === "relay" || options.purpose === "dlq"
        ? publishConnection(s)
        : serviceBusConnection(s),
    database:
      options.purpose === "publish" || options.purpose === "dlq"
        ? { kind: "embedded" }
        : databaseConnection(s),
    inboxSchema: s.SBINBOX_INBOX_SCHEMA,
    ...entitySettings(s, options.purpose ?? "worker"),
    handlersModule: s.SBINBOX_HANDLERS,
    maxConcurrentCalls: s.SBINBOX_MAX_CONCURRENT_CALLS,
    maxConcurrentSessions: s.SBINBOX_MAX_CONCURRENT_SESSIONS,
    maxAutoLockRenewalMs: s.SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS,
    lockDurationMs: s.SBINBOX_QUEUE_LOCK_DURATION_MS,
    precheck: s.SBINBOX_PRECHECK,
    batchSize: batchSize(s),
    batchWaitMs: s.SBINBOX_BATCH_WAIT_MS,
    batchMaxInFlight: s.SBINBOX_BATCH_MAX_IN_FLIGHT,
    maxMessageBytes: s.SBINBOX_MAX_MESSAGE_BYTES,
    gracePeriodMs: s.SBINBOX_GRACE_PERIOD_MS,
    progress: progressSettings(s),
    retentionMs: retention(s),
    cleanupIntervalMs: s.SBINBOX_CLEANUP_INTERVAL_MS,
    ...cleanupSpacing(s, raw),
    claimTimeoutMs: s.SBINBOX_CLAIM_TIMEOUT_MS,
    sweepIntervalMs: s.SBINBOX_SWEEP_INTERVAL_MS,
    outageBackoffMinMs: s.SBINBOX_OUTAGE_BACKOFF_MIN_MS,
    outageBackoffMaxMs: backoffMax(s),
    databaseTimeouts: {
      connectMs: s.SBINBOX_DB_CONNECT_TIMEOUT_MS,
      statementMs: s.SBINBOX_DB_STATEMENT_TIMEOUT_MS,
      idleInTransactionMs: s.SBINBOX_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS,
      keepAliveMs: s.SBINBOX_DB_KEEPALIVE_MS,
      probeMs: s.SBINBOX_DB_PROBE_TIMEOUT_MS,
    },
    retry: {
      transientDelaysMs: s.SBINBOX_RETRY_DELAYS_MS,
      permanentDelaysMs: s.SBINBOX_RETRY_PERMANENT_DELAYS_MS,
      migrationDelaysMs: s.SBINBOX_RETRY_MIGRATION_DELAYS_MS,
      jitter: s.SBINBOX_RETRY_JITTER,
      maxInProcessWaitMs: s.SBINBOX_RETRY_MAX_WAIT_MS,
    },
    startupLimitMs: s.SBINBOX_STARTUP_LIMIT_MS,
    logLevel: s.SBINBOX_LOG_LEVEL,
    faultKillAfterCommit: s.SBINBOX_FAULT_KILL_AFTER_COMMIT,
    faultKillAfterSend: s.SBINBOX_FAULT_KILL_AFTER_SEND,
    benchLayersOff: s.SBINBOX_BENCH_LAYERS_OFF,
    port: s.PORT,
    httpHost: s.SBINBOX_HTTP_HOST ?? (serviceBusConnection(s).kind === "embedded" ? "127.0.0.1" : "0.0.0.0"),
    applicationInsightsConnectionString: s.APPLICATIONINSIGHTS_CONNECTION_STRING,
    serviceName: s.OTEL_SERVICE_NAME,
    relay: relaySettings(s, options.purpose === "relay"),
  };
}

/**
 * The one place the entity is resolved: SBINBOX_QUEUE, or for senders (publish, the relay) SBINBOX_TOPIC. Receivers
 * (the worker, `sbinbox dlq`) take a queue only: on a topic, the service's own queue, which its subscription
 * forwards to.
 */
function entitySettings(
  s: RawSettings,
  purpose: NonNullable<LoadOptions["purpose"]>,
): { queue: string; consumer: string } {
  const { SBINBOX_QUEUE: queue, SBINBOX_TOPIC: topic, SBINBOX_SUBSCRIPTION: subscription } = s;
  checkEntityConflicts(queue, topic, subscription);
  const sends = purpose === "publish" || purpose === "relay";
  if (topic !== undefined && !sends)
    throw new ConfigError(
      "SBINBOX_TOPIC",
      "is where publish and the relay send; the worker and sbinbox dlq receive from the service's own queue (SBINBOX_QUEUE), which its subscription forwards to (docs/topics.md)",
    );
  return { queue: topic ?? queue ?? "sbinbox", consumer: s.SBINBOX_CONSUMER ?? "sbinbox" };
}

function relaySettings(s: RawSettings, check: boolean): RelaySettings {
  const relay: RelaySettings = {
    batchSize: s.SBINBOX_OUTBOX_BATCH_SIZE,
    pollIntervalMs: s.SBINBOX_OUTBOX_POLL_INTERVAL_MS,
    leaseMs: s.SBINBOX_OUTBOX_LEASE_MS,
    duplicateWindowMs: s.SBINBOX_QUEUE_DUPLICATE_WINDOW_MS,
    windowMarginMs: s.SBINBOX_OUTBOX_WINDOW_MARGIN_MS,
    retentionMs: s.SBINBOX_OUTBOX_RETENTION_HOURS * HOUR_MS,
    cleanupIntervalMs: s.SBINBOX_OUTBOX_CLEANUP_INTERVAL_MS,
    retryDelayMs: s.SBINBOX_OUTBOX_RETRY_DELAY_MS,
    sendTimeoutMs: s.SBINBOX_OUTBOX_SEND_TIMEOUT_MS,
    statusIntervalMs: s.SBINBOX_OUTBOX_STATUS_INTERVAL_MS,
  };
  if (check) checkRelaySettings(relay);
  return relay;
}

function pickEnv(env: NodeJS.ProcessEnv): Partial<Record<SettingName, string>> {
  const picked: Partial<Record<SettingName, string>> = {};
  for (const name of Object.keys(settings) as SettingName[]) {
    const value = env[name];
    // An empty variable means "not set": App Service and shells often leave them empty.
    if (value !== undefined && value.trim() !== "") picked[name] = value;
  }
  return picked;
}

function readConfigFile(
  path: string | undefined,
  readFile: (path: string) => string,
): Partial<Record<SettingName, string>> {
  if (path === undefined || path.trim() === "") return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFile(path));
  } catch (error) {
    throw new ConfigError("SBINBOX_CONFIG_FILE", `cannot read ${path} as JSON (${(error as Error).message})`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError("SBINBOX_CONFIG_FILE", `${path} must hold a JSON object of settings`);
  }
  const out: Partial<Record<SettingName, string>> = {};
  for (const [key, value] of Object.entries(parsed)) {
    if (!(key in settings)) throw new ConfigError(key, `unknown setting in ${path}`);
    if (typeof value !== "string" && typeof value !== "number" && typeof value !== "boolean") {
      throw new ConfigError(key, `must be a string, number or boolean in ${path}`);
    }
    out[key as SettingName] = String(value);
  }
  return out;
}

function parseAll(raw: Partial<Record<SettingName, string>>): RawSettings {
  const out: Record<string, unknown> = {};
  for (const name of Object.keys(parsers) as SettingName[]) {
    const result = parsers[name].safeParse(raw[name]);
    if (!result.success) {
      const problem = result.error.issues[0]?.message ?? "is invalid";
      throw new ConfigError(name, `${problem} (got ${JSON.stringify(raw[name])})`);
    }
    out[name] = result.data;
  }
  return out as RawSettings;
}

/** A batch forms from messages in flight at once, so it can never be larger than SBINBOX_MAX_CONCURRENT_CALLS. */
function batchSize(s: RawSettings): number | "auto" {
  if (s.SBINBOX_BATCH_SIZE !== "auto" && s.SBINBOX_BATCH_SIZE > s.SBINBOX_MAX_CONCURRENT_CALLS) {
    throw new ConfigError(
      "SBINBOX_BATCH_SIZE",
      `must be at most SBINBOX_MAX_CONCURRENT_CALLS (${s.SBINBOX_MAX_CONCURRENT_CALLS}): a batch is made of messages in flight at once (got ${s.SBINBOX_BATCH_SIZE})`,
    );
  }
  return s.SBINBOX_BATCH_SIZE;
}

function serviceBusConnection(s: RawSettings): ServiceBusConnection {
  const cs = s.SBINBOX_SERVICEBUS_CONNECTION_STRING;
  const ns = s.SBINBOX_SERVICEBUS_NAMESPACE;
  if (cs && ns) {
    throw new ConfigError(
      "SBINBOX_SERVICEBUS_NAMESPACE",
      "set either it or SBINBOX_SERVICEBUS_CONNECTION_STRING, not both",
    );
  }
  if (cs) return { kind: "connection-string", connectionString: cs };
  if (ns) return { kind: "namespace", fullyQualifiedNamespace: ns };
  if (anyDatabaseSetting(s)) {
    throw new ConfigError(
      "SBINBOX_SERVICEBUS_CONNECTION_STRING",
      "a database is configured but no Service Bus: set it or SBINBOX_SERVICEBUS_NAMESPACE (embedded defaults apply only when nothing is configured)",
    );
  }
  return { kind: "embedded" };
}

function publishConnection(s: RawSettings): ServiceBusConnection {
  if (!s.SBINBOX_SERVICEBUS_CONNECTION_STRING && !s.SBINBOX_SERVICEBUS_NAMESPACE) {
    throw new ConfigError(
      "SBINBOX_SERVICEBUS_CONNECTION_STRING",
      "required to publish (or SBINBOX_SERVICEBUS_NAMESPACE); a worker on embedded defaults logs the one to use",
    );
  }
  return serviceBusConnection(s);
}

function anyDatabaseSetting(s: RawSettings): boolean {
  return [
    s.SBINBOX_DATABASE,
    s.SBINBOX_POSTGRES_URL,
    s.SBINBOX_SQLSERVER_CONNECTION_STRING,
    s.SBINBOX_SQLSERVER_SERVER,
    s.SBINBOX_SQLSERVER_DATABASE,
  ].some((v) => v !== undefined);
}

function databaseConnection(s: RawSettings): DatabaseConnection {
  const pgUrl = s.SBINBOX_POSTGRES_URL;
  const sqlCs = s.SBINBOX_SQLSERVER_CONNECTION_STRING;
  const server = s.SBINBOX_SQLSERVER_SERVER;
  const database = s.SBINBOX_SQLSERVER_DATABASE;
  const sqlGiven = sqlCs !== undefined || server !== undefined || database !== undefined;
  const kind = s.SBINBOX_DATABASE ?? (pgUrl ? "postgres" : sqlGiven ? "sqlserver" : undefined);
  if (kind === undefined) {
    if (s.SBINBOX_SERVICEBUS_CONNECTION_STRING || s.SBINBOX_SERVICEBUS_NAMESPACE) {
      throw new ConfigError(
        "SBINBOX_DATABASE",
        "Service Bus is configured but no database: set SBINBOX_POSTGRES_URL, SBINBOX_SQLSERVER_CONNECTION_STRING or SBINBOX_SQLSERVER_SERVER and SBINBOX_SQLSERVER_DATABASE",
      );
    }
    return { kind: "embedded" };
  }
  if (kind === "postgres") {
    if (!pgUrl) throw new ConfigError("SBINBOX_POSTGRES_URL", "required when SBINBOX_DATABASE is postgres");
    return { kind: "postgres", url: pgUrl };
  }
  if (sqlCs) {
    if (server || database) {
      throw new ConfigError(
        "SBINBOX_SQLSERVER_SERVER",
        "set either SBINBOX_SQLSERVER_CONNECTION_STRING or SBINBOX_SQLSERVER_SERVER with SBINBOX_SQLSERVER_DATABASE, not both",
      );
    }
    return { kind: "sqlserver", connectionString: sqlCs };
  }
  if (!server)
    throw new ConfigError("SBINBOX_SQLSERVER_SERVER", "required for SQL Server with Entra ID authentication");
  if (!database)
    throw new ConfigError("SBINBOX_SQLSERVER_DATABASE", "required with SBINBOX_SQLSERVER_SERVER");
  return { kind: "sqlserver-entra", server, database };
}

/**
 * An inbox row must outlive every redelivery of its message, or a late redelivery would apply the effect twice.
 */
function retention(s: RawSettings): number {
  const retentionMs = s.SBINBOX_RETENTION_HOURS * HOUR_MS;
  const redeliverableMs =
    s.SBINBOX_QUEUE_LOCK_DURATION_MS * s.SBINBOX_QUEUE_MAX_DELIVERY_COUNT +
    s.SBINBOX_QUEUE_MESSAGE_TTL_HOURS * HOUR_MS;
  if (retentionMs <= redeliverableMs) {
    throw new ConfigError(
      "SBINBOX_RETENTION_HOURS",
      `${s.SBINBOX_RETENTION_HOURS} h is not longer than the broker can still redeliver a message ` +
        `(SBINBOX_QUEUE_LOCK_DURATION_MS x SBINBOX_QUEUE_MAX_DELIVERY_COUNT + SBINBOX_QUEUE_MESSAGE_TTL_HOURS = ` +
        `${(redeliverableMs / HOUR_MS).toFixed(2)} h)`,
    );
  }
  return retentionMs;
}

/**
 * The retention pass's spacing: the pace by the insert rate, or a fixed pause when SBINBOX_CLEANUP_PAUSE_MS is set.
 * Both given is refused: the pause would silently override the pace's settings.
 */
function cleanupSpacing(
  s: RawSettings,
  raw: Partial<Record<SettingName, string>>,
): Pick<Config, "cleanupPauseMs" | "cleanupPace" | "cleanupBatchRows"> {
  const paceSet = (["SBINBOX_CLEANUP_RATE_MULTIPLE", "SBINBOX_CLEANUP_MIN_RATE"] as const).find(
    (name) => raw[name] !== undefined,
  );
  if (s.SBINBOX_CLEANUP_PAUSE_MS !== undefined && paceSet !== undefined) {
    throw new ConfigError(
      "SBINBOX_CLEANUP_PAUSE_MS",
      `a fixed pause replaces the pace, so ${paceSet} would be ignored: set one or the other`,
    );
  }
  // A fixed pause alone is the behaviour before the pace: batches of 2,000 (the pace's 500 a batch with a 250 ms
  // pause would delete a quarter as fast), unless SBINBOX_CLEANUP_BATCH_ROWS says otherwise.
  const pausedBatch =
    s.SBINBOX_CLEANUP_PAUSE_MS !== undefined && raw.SBINBOX_CLEANUP_BATCH_ROWS === undefined;
  return {
    cleanupPauseMs: s.SBINBOX_CLEANUP_PAUSE_MS,
    cleanupPace: { multiple: s.SBINBOX_CLEANUP_RATE_MULTIPLE, minPerSecond: s.SBINBOX_CLEANUP_MIN_RATE },
    cleanupBatchRows: pausedBatch ? DEFAULT_CLEANUP_BATCH : s.SBINBOX_CLEANUP_BATCH_ROWS,
  };
}

function backoffMax(s: RawSettings): number {
  if (s.SBINBOX_OUTAGE_BACKOFF_MAX_MS < s.SBINBOX_OUTAGE_BACKOFF_MIN_MS) {
    throw new ConfigError("SBINBOX_OUTAGE_BACKOFF_MAX_MS", "must not be below SBINBOX_OUTAGE_BACKOFF_MIN_MS");
  }
  return s.SBINBOX_OUTAGE_BACKOFF_MAX_MS;
}

export interface ProgressSettings {
  readonly quietMs: number;
  readonly probeTimeoutMs: number;
  readonly silentAfterMs: number;
  readonly recoverAfterMs: number;
}

/** A link can only turn silent after a peek went unanswered, so the quiet time and the peek's must fit before it. */
function progressSettings(s: RawSettings): ProgressSettings {
  if (
    s.SBINBOX_PROGRESS_SILENT_AFTER_MS <
    s.SBINBOX_PROGRESS_QUIET_MS + s.SBINBOX_PROGRESS_PROBE_TIMEOUT_MS
  ) {
    throw new ConfigError(
      "SBINBOX_PROGRESS_SILENT_AFTER_MS",
      "must be at least SBINBOX_PROGRESS_QUIET_MS + SBINBOX_PROGRESS_PROBE_TIMEOUT_MS",
    );
  }
  return {
    quietMs: s.SBINBOX_PROGRESS_QUIET_MS,
    probeTimeoutMs: s.SBINBOX_PROGRESS_PROBE_TIMEOUT_MS,
    silentAfterMs: s.SBINBOX_PROGRESS_SILENT_AFTER_MS,
    recoverAfterMs: s.SBINBOX_PROGRESS_RECOVER_AFTER_MS,
  };
}
