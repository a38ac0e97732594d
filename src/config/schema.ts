import { z } from "zod";
import { INBOX_SCHEMA_PATTERN } from "../inbox/schema-name.ts";

/**
 * Every setting the worker and the CLI read, by its environment variable name. The optional JSON file named by
 * SBINBOX_CONFIG_FILE uses the same names as keys; the environment wins over the file.
 */
export const settings = {
  SBINBOX_SERVICEBUS_CONNECTION_STRING:
    "Service Bus connection string (local broker, official emulator or SAS)",
  SBINBOX_SERVICEBUS_NAMESPACE:
    "fully qualified namespace (x.servicebus.windows.net), signed in with DefaultAzureCredential",
  SBINBOX_QUEUE: "queue to receive from and publish to",
  SBINBOX_CONSUMER: "consumer name written into each inbox marker",
  SBINBOX_DATABASE: "postgres or sqlserver (inferred from the settings given when omitted)",
  SBINBOX_POSTGRES_URL: "PostgreSQL URL",
  SBINBOX_SQLSERVER_CONNECTION_STRING: "SQL Server connection string",
  SBINBOX_SQLSERVER_SERVER: "SQL Server host name, with Entra ID token authentication",
  SBINBOX_SQLSERVER_DATABASE: "SQL Server database name, with SBINBOX_SQLSERVER_SERVER",
  SBINBOX_HANDLERS:
    "the handler module (file path or package) the worker runs and `sbinbox migrate` migrates; unset: the example",
  SBINBOX_INBOX_SCHEMA: "schema of the inbox's tables (default dbo on SQL Server, public on PostgreSQL)",
  SBINBOX_MAX_CONCURRENT_CALLS: "messages handled at once",
  SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS: "how long the SDK keeps renewing a message lock (0 turns renewal off)",
  SBINBOX_PRECHECK: "read the inbox before the transaction to skip late redeliveries cheaply (true/false)",
  SBINBOX_MAX_MESSAGE_BYTES: "bodies larger than this are dead-lettered as MessageTooLarge",
  SBINBOX_GRACE_PERIOD_MS: "how long a stop waits for in-flight messages",
  SBINBOX_RETENTION_HOURS: "how long inbox rows are kept",
  SBINBOX_CLEANUP_INTERVAL_MS: "how often old inbox rows are deleted (0 turns cleanup off)",
  SBINBOX_QUEUE_LOCK_DURATION_MS: "the queue's LockDuration, for the retention check",
  SBINBOX_QUEUE_MAX_DELIVERY_COUNT: "the queue's MaxDeliveryCount, for the retention check",
  SBINBOX_QUEUE_MESSAGE_TTL_HOURS: "the queue's DefaultMessageTimeToLive, for the retention check",
  SBINBOX_CLAIM_TIMEOUT_MS: "a two-phase claim open longer than this is made retryable by the sweeper",
  SBINBOX_SWEEP_INTERVAL_MS: "how often the sweeper runs (0 turns it off)",
  SBINBOX_OUTAGE_BACKOFF_MIN_MS: "first wait between database probes while receiving is paused",
  SBINBOX_OUTAGE_BACKOFF_MAX_MS: "longest wait between database probes while receiving is paused",
  SBINBOX_LOG_LEVEL: "debug, info, warn or error",
  SBINBOX_FAULT_KILL_AFTER_COMMIT:
    "fault injection for the demo and chaos runs only: SIGKILL the process after this MessageId commits",
  PORT: "HTTP port of /healthz and /readyz (0 picks a free port)",
  SBINBOX_HTTP_HOST: "address the HTTP listener binds (default 0.0.0.0; 127.0.0.1 on embedded defaults)",
  APPLICATIONINSIGHTS_CONNECTION_STRING: "Application Insights connection string (telemetry export)",
  OTEL_SERVICE_NAME: "service name on traces, metrics and logs",
} as const;

export type SettingName = keyof typeof settings;

const text = z.string().trim().min(1, "must not be empty");
const int = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));
const bool = z
  .string()
  .trim()
  .toLowerCase()
  .refine((v) => ["true", "false", "1", "0", "yes", "no", "on", "off"].includes(v), "must be true or false")
  .transform((v) => ["true", "1", "yes", "on"].includes(v));

/** One parser per setting, each with its default; raw values are strings, as the environment gives them. */
export const parsers = {
  SBINBOX_SERVICEBUS_CONNECTION_STRING: text
    .refine((v) => /(^|;)\s*Endpoint\s*=\s*sb:\/\//i.test(v), "must contain Endpoint=sb://...")
    .optional(),
  SBINBOX_SERVICEBUS_NAMESPACE: text
    .refine((v) => /^[a-z0-9.-]+$/i.test(v) && v.includes("."), "must be a fully qualified host name")
    .optional(),
  SBINBOX_QUEUE: text.max(260).default("sbinbox"),
  SBINBOX_CONSUMER: text.max(200).default("sbinbox"),
  SBINBOX_DATABASE: z.enum(["postgres", "sqlserver"], "must be postgres or sqlserver").optional(),
  SBINBOX_POSTGRES_URL: text
    .refine((v) => /^postgres(ql)?:\/\//.test(v), "must start with postgres://")
    .optional(),
  SBINBOX_SQLSERVER_CONNECTION_STRING: text.optional(),
  SBINBOX_SQLSERVER_SERVER: text.optional(),
  SBINBOX_SQLSERVER_DATABASE: text.optional(),
  SBINBOX_HANDLERS: text
    .refine((v) => !/\s/.test(v), "must be a file path or a package name, without spaces")
    .optional(),
  SBINBOX_INBOX_SCHEMA: text
    .regex(
      INBOX_SCHEMA_PATTERN,
      "must be a plain identifier: a letter or _, then letters, digits or _ (at most 63)",
    )
    .optional(),
  SBINBOX_MAX_CONCURRENT_CALLS: int(1, 1000).default(16),
  SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS: int(0).default(300_000),
  SBINBOX_PRECHECK: bool.default(true),
  SBINBOX_MAX_MESSAGE_BYTES: int(1).default(262_144),
  SBINBOX_GRACE_PERIOD_MS: int(0).default(20_000),
  SBINBOX_RETENTION_HOURS: int(1).default(24 * 15),
  SBINBOX_CLEANUP_INTERVAL_MS: int(0).default(600_000),
  SBINBOX_QUEUE_LOCK_DURATION_MS: int(1).default(60_000),
  SBINBOX_QUEUE_MAX_DELIVERY_COUNT: int(1).default(10),
  SBINBOX_QUEUE_MESSAGE_TTL_HOURS: int(1).default(24 * 14),
  SBINBOX_CLAIM_TIMEOUT_MS: int(1).default(300_000),
  SBINBOX_SWEEP_INTERVAL_MS: int(0).default(60_000),
  SBINBOX_OUTAGE_BACKOFF_MIN_MS: int(1).default(250),
  SBINBOX_OUTAGE_BACKOFF_MAX_MS: int(1).default(15_000),
  SBINBOX_LOG_LEVEL: z
    .enum(["debug", "info", "warn", "error"], "must be debug, info, warn or error")
    .default("info"),
  SBINBOX_FAULT_KILL_AFTER_COMMIT: text.optional(),
  PORT: int(0, 65535).default(8080),
  SBINBOX_HTTP_HOST: text.optional(),
  APPLICATIONINSIGHTS_CONNECTION_STRING: text.optional(),
  OTEL_SERVICE_NAME: text.default("sbinbox"),
} satisfies Record<SettingName, z.ZodType>;

export type RawSettings = { [K in SettingName]: z.output<(typeof parsers)[K]> };
