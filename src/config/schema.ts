import { z } from "zod";
import { INBOX_SCHEMA_PATTERN } from "../inbox/schema-name.ts";
import { PROGRESS_DEFAULTS } from "../domain/progress-defaults.ts";
import { DEFAULT_CLEANUP_PACE, DEFAULT_PACED_BATCH_ROWS } from "../inbox/cleanup-pace.ts";
import { serviceBusRules as sb } from "./rules.ts";

/**
 * Every setting the worker and the CLI read, by its environment variable name. The optional JSON file named by
 * SBINBOX_CONFIG_FILE uses the same names as keys; the environment wins over the file.
 */
export const settings = {
  SBINBOX_SERVICEBUS_CONNECTION_STRING:
    "Service Bus connection string (local broker, official emulator or SAS)",
  SBINBOX_SERVICEBUS_NAMESPACE:
    "fully qualified namespace (x.servicebus.windows.net), signed in with DefaultAzureCredential",
  SBINBOX_QUEUE: "queue to receive from and publish to (default sbinbox; not with SBINBOX_TOPIC)",
  SBINBOX_TOPIC:
    "topic that publish and the relay send to (instead of SBINBOX_QUEUE); a worker on it receives from its own queue",
  SBINBOX_SUBSCRIPTION:
    "no longer read, and refused: a worker on a topic receives from its own queue, which its subscription forwards to",
  SBINBOX_CONSUMER: "consumer name written into each inbox marker (default sbinbox)",
  SBINBOX_DATABASE: "postgres or sqlserver (inferred from the settings given when omitted)",
  SBINBOX_POSTGRES_URL: "PostgreSQL URL",
  SBINBOX_SQLSERVER_CONNECTION_STRING: "SQL Server connection string",
  SBINBOX_SQLSERVER_SERVER: "SQL Server host name, with Entra ID token authentication",
  SBINBOX_SQLSERVER_DATABASE: "SQL Server database name, with SBINBOX_SQLSERVER_SERVER",
  SBINBOX_HANDLERS:
    "the handler module (file path or package) the worker runs and `sbinbox migrate` migrates; unset: the example",
  SBINBOX_INBOX_SCHEMA: "schema of the inbox's tables (default dbo on SQL Server, public on PostgreSQL)",
  SBINBOX_MAX_CONCURRENT_CALLS: "messages handled at once",
  SBINBOX_MAX_CONCURRENT_SESSIONS:
    "session mode when above 0: most sessions held at once, one message each at a time, in order (the entity must require sessions)",
  SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS: "how long the SDK keeps renewing a message lock (0 turns renewal off)",
  SBINBOX_BATCH_SIZE:
    "most messages per inbox transaction (group commit, docs/batching.md); 1 is one transaction per message; auto: batches of half of SBINBOX_MAX_CONCURRENT_CALLS for handlers that declare keys where that pays, the others one each",
  SBINBOX_BATCH_WAIT_MS:
    "how long a batch's first message waits for more before the batch runs; 0: no wait, a batch forms from what arrives while transactions run",
  SBINBOX_BATCH_MAX_IN_FLIGHT:
    "most batch transactions of one worker at once, assigned by the handlers' keys so that no key is in two; a batch holding a message whose handler declares no keys runs alone (docs/batching.md)",
  SBINBOX_PRECHECK:
    "read the inbox before the transaction, so late redeliveries cost one read: redeliveries (all but first deliveries, unless over half of recent ones were duplicates), true (all), false (none)",
  SBINBOX_MAX_MESSAGE_BYTES: "bodies larger than this are dead-lettered as MessageTooLarge",
  SBINBOX_GRACE_PERIOD_MS: "how long a stop waits for in-flight messages",
  SBINBOX_PROGRESS_QUIET_MS:
    "with nothing heard from Service Bus this long, the worker peeks to ask (readiness)",
  SBINBOX_PROGRESS_PROBE_TIMEOUT_MS: "how long that peek may take before it counts as unanswered",
  SBINBOX_PROGRESS_SILENT_AFTER_MS: "nothing heard this long (and a peek unanswered): /readyz says silent",
  SBINBOX_PROGRESS_RECOVER_AFTER_MS: "answers heard throughout this long: /readyz says ok again",
  SBINBOX_RETENTION_HOURS: "how long inbox rows are kept",
  SBINBOX_CLEANUP_INTERVAL_MS: "how often old inbox rows are deleted (0 turns cleanup off)",
  SBINBOX_CLEANUP_RATE_MULTIPLE:
    "the cleanup deletes this many times the inbox's measured insert rate while old rows remain (1 to 1000)",
  SBINBOX_CLEANUP_MIN_RATE: "the fewest rows a second the cleanup deletes, whatever the insert rate",
  SBINBOX_CLEANUP_BATCH_ROWS:
    "rows one cleanup statement reads by the key (1 to 4000, under lock escalation)",
  SBINBOX_CLEANUP_PAUSE_MS:
    "a fixed pause between the cleanup's batches instead of the pace (unset: the pace by the insert rate)",
  SBINBOX_QUEUE_LOCK_DURATION_MS: "the queue's LockDuration, for the retention check",
  SBINBOX_QUEUE_MAX_DELIVERY_COUNT: "the queue's MaxDeliveryCount, for the retention check",
  SBINBOX_QUEUE_MESSAGE_TTL_HOURS: "the queue's DefaultMessageTimeToLive, for the retention check",
  SBINBOX_CLAIM_TIMEOUT_MS: "a two-phase claim open longer than this is made retryable by the sweeper",
  SBINBOX_SWEEP_INTERVAL_MS: "how often the sweeper runs (0 turns it off)",
  SBINBOX_OUTAGE_BACKOFF_MIN_MS: "first wait between database probes while receiving is paused",
  SBINBOX_OUTAGE_BACKOFF_MAX_MS: "longest wait between database probes while receiving is paused",
  SBINBOX_DB_CONNECT_TIMEOUT_MS: "longest wait for a new database connection (or a free pooled one)",
  SBINBOX_DB_STATEMENT_TIMEOUT_MS: "longest wait for one database statement, the handler's included",
  SBINBOX_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS:
    "longest pause of a handler between its statements (PostgreSQL's idle_in_transaction_session_timeout)",
  SBINBOX_DB_KEEPALIVE_MS:
    "idle time before TCP keep-alive probes start on a database connection (PostgreSQL)",
  SBINBOX_DB_PROBE_TIMEOUT_MS: "longest wait for the outage and readiness probes",
  SBINBOX_RETRY_DELAYS_MS:
    "delays before each retry of a transient failure, comma-separated ms (their count is the number of retries; none for no retry)",
  SBINBOX_RETRY_PERMANENT_DELAYS_MS:
    "the same for a permanent failure (a bug, a constraint violation in the handler)",
  SBINBOX_RETRY_MIGRATION_DELAYS_MS:
    "the same for a handler's statement that names a table or column that does not exist (yet: a migration not applied)",
  SBINBOX_RETRY_JITTER: "each retry delay is drawn from delay x [1 - jitter, 1 + jitter] (0 to 1)",
  SBINBOX_RETRY_MAX_WAIT_MS:
    "longest retry delay waited out in the worker under the message's lock; longer ones schedule a copy",
  SBINBOX_QUEUE_DUPLICATE_WINDOW_MS:
    "the queue's DuplicateDetectionHistoryTimeWindow, for the relay's resend check (docs/outbox.md)",
  SBINBOX_OUTBOX_BATCH_SIZE: "outbox rows the relay claims and sends at a time",
  SBINBOX_OUTBOX_POLL_INTERVAL_MS: "how often the relay looks for unsent rows when nothing wakes it",
  SBINBOX_OUTBOX_LEASE_MS: "how long a relay's claim keeps other relays off its rows",
  SBINBOX_OUTBOX_WINDOW_MARGIN_MS:
    "part of the duplicate-detection window kept back for send and clock delays",
  SBINBOX_OUTBOX_RETENTION_HOURS: "how long sent outbox rows are kept (0 keeps them)",
  SBINBOX_OUTBOX_CLEANUP_INTERVAL_MS:
    "how often sent outbox rows past the retention are deleted (0 turns it off)",
  SBINBOX_OUTBOX_SEND_TIMEOUT_MS:
    "the longest one batch's send may take (one try, no SDK retries); must be shorter than the lease",
  SBINBOX_OUTBOX_RETRY_DELAY_MS: "first wait after the broker or network failed a send; doubles up to 30 s",
  SBINBOX_OUTBOX_STATUS_INTERVAL_MS:
    "how often the relay reads outbox lag and stale rows for /readyz and metrics",
  SBINBOX_STARTUP_LIMIT_MS:
    "how long start-up retries a refusal (login refused, queue missing, access denied) before it exits 1; 0 exits on the first",
  SBINBOX_LOG_LEVEL: "debug, info, warn or error",
  SBINBOX_FAULT_KILL_AFTER_COMMIT:
    "fault injection for the demo and chaos runs only: SIGKILL the process after this MessageId commits",
  SBINBOX_FAULT_KILL_AFTER_SEND:
    "fault injection for chaos runs only: the relay SIGKILLs itself after sending this MessageId, before marking it sent",
  SBINBOX_BENCH_LAYERS_OFF:
    "for the CPU benchmark only: worker layers switched off (progress, settlement-guard), comma-separated; unsafe",
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
/** Node turns a timer delay above this into 1 ms, so no duration setting may exceed it. */
export const MAX_TIMER_MS = 2_147_483_647;
/** Ten years: beyond any broker's redelivery window, and small enough to stay exact in milliseconds. */
export const MAX_HOURS = 87_600;
const ms = (min: number, max = MAX_TIMER_MS) => int(min, max);
const hours = (min: number, max = MAX_HOURS) => int(min, Math.min(max, MAX_HOURS));
const TRUE = ["true", "1", "yes", "on"];
const FALSE = ["false", "0", "no", "off"];
/** "redeliveries", or a boolean as `bool` reads one. */
const precheck = z
  .string()
  .trim()
  .toLowerCase()
  .refine(
    (v) => v === "redeliveries" || TRUE.includes(v) || FALSE.includes(v),
    "must be redeliveries, true or false",
  )
  .transform((v): boolean | "redeliveries" => (v === "redeliveries" ? v : TRUE.includes(v)));

const batchSize = z
  .string()
  .trim()
  .toLowerCase()
  .refine((v) => v === "auto" || /^\d+$/.test(v), "must be auto or a whole number")
  .transform((v): number | "auto" => (v === "auto" ? v : Number(v)))
  .refine((v) => v === "auto" || v >= 1, "must be at least 1, or auto")
  .refine((v) => v === "auto" || v <= 1000, "must be at most 1000, or auto");

/** The worker layers the CPU benchmark can switch off (docs/benchmark.md, "The ledger"). */
export const BENCH_LAYERS = ["progress", "settlement-guard"] as const;
export type BenchLayer = (typeof BENCH_LAYERS)[number];
const benchLayers = z
  .string()
  .trim()
  .transform((v) => [...new Set(v.split(",").map((name) => name.trim().toLowerCase()))].filter(Boolean))
  .refine(
    (names) => names.every((name) => (BENCH_LAYERS as readonly string[]).includes(name)),
    `must name only ${BENCH_LAYERS.join(", ")}, comma-separated`,
  )
  .transform((names) => names as BenchLayer[]);

const DAY_MS = 24 * 3_600_000;
const delayList = z
  .string()
  .trim()
  .transform((v, ctx) => {
    if (v.toLowerCase() === "none") return [];
    const out: number[] = [];
    for (const [i, part] of v.split(",").entries()) {
      const p = part.trim();
      if (!/^\d+$/.test(p) || Number(p) > 7 * DAY_MS) {
        ctx.addIssue({
          code: "custom",
          message: /^\d+$/.test(p)
            ? `element ${i + 1} ("${p}") must be at most ${7 * DAY_MS} (7 days)`
            : `element ${i + 1} ("${p}") must be a whole number of milliseconds, or the list "none"`,
        });
        return z.NEVER;
      }
      out.push(Number(p));
    }
    if (out.length > 100) {
      ctx.addIssue({ code: "custom", message: "must list at most 100 delays" });
      return z.NEVER;
    }
    return out;
  });
const fraction = z
  .string()
  .trim()
  .regex(/^(0|1|0?\.\d+|1\.0+)$/, "must be a number from 0 to 1")
  .transform(Number);

/** One parser per setting, each with its default; raw values are strings, as the environment gives them. */
export const parsers = {
  // The rules `sbinbox publish` also applies without zod (publish.ts).
  SBINBOX_SERVICEBUS_CONNECTION_STRING: text
    .superRefine((v, ctx) => {
      const gap = sb.connectionString.gap(v);
      if (gap !== undefined) ctx.addIssue({ code: "custom", message: gap });
    })
    .optional(),
  SBINBOX_SERVICEBUS_NAMESPACE: text.refine(sb.namespace.test, sb.namespace.message).optional(),
  SBINBOX_QUEUE: text.max(sb.queue.max, sb.queue.message).optional(),
  SBINBOX_TOPIC: text
    .max(sb.topic.max, sb.topic.maxMessage)
    .regex(sb.topic.pattern, sb.topic.message)
    .optional(),
  SBINBOX_SUBSCRIPTION: text
    .max(sb.subscription.max, sb.subscription.maxMessage)
    .regex(sb.subscription.pattern, sb.subscription.message)
    .optional(),
  SBINBOX_CONSUMER: text.max(200).optional(),
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
  SBINBOX_MAX_CONCURRENT_SESSIONS: int(0, 1000).default(0),
  SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS: ms(0).default(300_000),
  // 1,000: SQL Server's VALUES list limit (and 1,001 parameters, under its 2,100).
  SBINBOX_BATCH_SIZE: batchSize.default("auto"),
  SBINBOX_BATCH_WAIT_MS: ms(0, 1000).default(0),
  // As the batcher's DEFAULT_BATCH_MAX_IN_FLIGHT (docs/batching.md has the measurement).
  SBINBOX_BATCH_MAX_IN_FLIGHT: int(1, 1000).default(4),
  SBINBOX_PRECHECK: precheck.default("redeliveries"),
  SBINBOX_MAX_MESSAGE_BYTES: int(1).default(262_144),
  SBINBOX_GRACE_PERIOD_MS: ms(0).default(20_000),
  SBINBOX_PROGRESS_QUIET_MS: ms(100).default(PROGRESS_DEFAULTS.quietMs),
  SBINBOX_PROGRESS_PROBE_TIMEOUT_MS: ms(100).default(PROGRESS_DEFAULTS.probeTimeoutMs),
  SBINBOX_PROGRESS_SILENT_AFTER_MS: ms(100).default(PROGRESS_DEFAULTS.silentAfterMs),
  SBINBOX_PROGRESS_RECOVER_AFTER_MS: ms(100).default(PROGRESS_DEFAULTS.recoverAfterMs),
  SBINBOX_RETENTION_HOURS: hours(1).default(24 * 15),
  SBINBOX_CLEANUP_INTERVAL_MS: ms(0).default(600_000),
  SBINBOX_CLEANUP_RATE_MULTIPLE: int(1, 1000).default(DEFAULT_CLEANUP_PACE.multiple),
  SBINBOX_CLEANUP_MIN_RATE: int(1, 10_000_000).default(DEFAULT_CLEANUP_PACE.minPerSecond),
  // 4,000: under SQL Server's lock escalation at 5,000 locks on one statement.
  SBINBOX_CLEANUP_BATCH_ROWS: int(1, 4000).default(DEFAULT_PACED_BATCH_ROWS),
  SBINBOX_CLEANUP_PAUSE_MS: ms(0, 10_000).optional(),
  SBINBOX_QUEUE_LOCK_DURATION_MS: ms(1).default(60_000),
  SBINBOX_QUEUE_MAX_DELIVERY_COUNT: int(1).default(10),
  SBINBOX_QUEUE_MESSAGE_TTL_HOURS: hours(1).default(24 * 14),
  SBINBOX_CLAIM_TIMEOUT_MS: ms(1).default(300_000),
  SBINBOX_SWEEP_INTERVAL_MS: ms(0).default(60_000),
  SBINBOX_OUTAGE_BACKOFF_MIN_MS: ms(1).default(250),
  SBINBOX_OUTAGE_BACKOFF_MAX_MS: ms(1).default(15_000),
  SBINBOX_DB_CONNECT_TIMEOUT_MS: ms(100, 600_000).default(15_000),
  SBINBOX_DB_STATEMENT_TIMEOUT_MS: ms(100, 3_600_000).default(30_000),
  SBINBOX_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: ms(100, 3_600_000).default(120_000),
  SBINBOX_DB_KEEPALIVE_MS: ms(1_000, 600_000).default(10_000),
  SBINBOX_DB_PROBE_TIMEOUT_MS: ms(100, 600_000).default(2_000),
  SBINBOX_RETRY_DELAYS_MS: delayList.default([1_000, 5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000]),
  SBINBOX_RETRY_PERMANENT_DELAYS_MS: delayList.default([5_000]),
  SBINBOX_RETRY_MIGRATION_DELAYS_MS: delayList.default([5_000, 30_000, 120_000, 600_000]),
  SBINBOX_RETRY_JITTER: fraction.default(0.2),
  SBINBOX_RETRY_MAX_WAIT_MS: ms(0, 3_600_000).default(30_000),
  // Service Bus allows 20 seconds to 7 days for the window.
  SBINBOX_QUEUE_DUPLICATE_WINDOW_MS: ms(20_000, 7 * 24 * 3_600_000).default(600_000),
  SBINBOX_OUTBOX_BATCH_SIZE: int(1, 4_500).default(100),
  SBINBOX_OUTBOX_POLL_INTERVAL_MS: ms(10).default(1_000),
  SBINBOX_OUTBOX_LEASE_MS: ms(1_000).default(60_000),
  SBINBOX_OUTBOX_WINDOW_MARGIN_MS: ms(0).default(60_000),
  SBINBOX_OUTBOX_RETENTION_HOURS: hours(0, 24 * 365).default(24),
  SBINBOX_OUTBOX_CLEANUP_INTERVAL_MS: ms(0).default(600_000),
  SBINBOX_OUTBOX_SEND_TIMEOUT_MS: ms(100).default(20_000),
  SBINBOX_OUTBOX_RETRY_DELAY_MS: ms(1).default(1_000),
  SBINBOX_OUTBOX_STATUS_INTERVAL_MS: ms(100).default(5_000),
  SBINBOX_STARTUP_LIMIT_MS: ms(0, 86_400_000).default(600_000),
  SBINBOX_LOG_LEVEL: z
    .enum(["debug", "info", "warn", "error"], "must be debug, info, warn or error")
    .default("info"),
  SBINBOX_FAULT_KILL_AFTER_COMMIT: text.optional(),
  SBINBOX_FAULT_KILL_AFTER_SEND: text.optional(),
  SBINBOX_BENCH_LAYERS_OFF: benchLayers.default([]),
  PORT: int(0, 65535).default(8080),
  SBINBOX_HTTP_HOST: text.optional(),
  APPLICATIONINSIGHTS_CONNECTION_STRING: text.optional(),
  OTEL_SERVICE_NAME: text.default("sbinbox"),
} satisfies Record<SettingName, z.ZodType>;

export type RawSettings = { [K in SettingName]: z.output<(typeof parsers)[K]> };
