import { ConfigError } from "../domain/errors.ts";

export interface RelaySettings {
  /** Rows claimed and sent at a time. */
  readonly batchSize: number;
  /** How often to look for rows when nothing wakes the relay (the only way on SQL Server). */
  readonly pollIntervalMs: number;
  /** How long a claim keeps other relays off its rows; a relay killed while sending frees them after this. */
  readonly leaseMs: number;
  /** The queue's DuplicateDetectionHistoryTimeWindow. */
  readonly duplicateWindowMs: number;
  /** Part of the window kept back for send and clock delays: the relay resends only inside window - margin. */
  readonly windowMarginMs: number;
  /** Sent rows are deleted after this long (0 keeps them). */
  readonly retentionMs: number;
  readonly cleanupIntervalMs: number;
  /**
   * The longest one batch's send may take, all tries included: the client's retryOptions must keep to it (the
   * CLI's client makes one try with this timeout). A batch is started only while it can end inside the lease.
   */
  readonly sendTimeoutMs: number;
  /** First wait after a failure that is not a row's; doubles up to 30 s. */
  readonly retryDelayMs: number;
  /** How often lag, stale and set-aside counts are read for /readyz and the metrics. */
  readonly statusIntervalMs: number;
}

export const DEFAULT_RELAY_SETTINGS: RelaySettings = {
  batchSize: 100,
  pollIntervalMs: 1_000,
  leaseMs: 60_000,
  duplicateWindowMs: 10 * 60_000,
  windowMarginMs: 60_000,
  retentionMs: 24 * 3_600_000,
  cleanupIntervalMs: 600_000,
  sendTimeoutMs: 20_000,
  retryDelayMs: 1_000,
  statusIntervalMs: 5_000,
};

/** Setting names, for the ConfigError of checkRelaySettings. */
export const RELAY_SETTING_NAMES: Record<keyof RelaySettings, string> = {
  batchSize: "SBINBOX_OUTBOX_BATCH_SIZE",
  pollIntervalMs: "SBINBOX_OUTBOX_POLL_INTERVAL_MS",
  leaseMs: "SBINBOX_OUTBOX_LEASE_MS",
  duplicateWindowMs: "SBINBOX_QUEUE_DUPLICATE_WINDOW_MS",
  windowMarginMs: "SBINBOX_OUTBOX_WINDOW_MARGIN_MS",
  retentionMs: "SBINBOX_OUTBOX_RETENTION_HOURS",
  cleanupIntervalMs: "SBINBOX_OUTBOX_CLEANUP_INTERVAL_MS",
  sendTimeoutMs: "SBINBOX_OUTBOX_SEND_TIMEOUT_MS",
  retryDelayMs: "SBINBOX_OUTBOX_RETRY_DELAY_MS",
  statusIntervalMs: "SBINBOX_OUTBOX_STATUS_INTERVAL_MS",
};

/**
 * Refuses settings under which a resend could reach the broker after its duplicate-detection window has
 * forgotten the first copy. A row whose send may have reached the broker is sent again only after its lease
 * ends and the next poll finds it; both must fit, twice, in the part of the window the relay uses.
 */
export function checkRelaySettings(s: RelaySettings): void {
  const n = RELAY_SETTING_NAMES;
  const usable = s.duplicateWindowMs - s.windowMarginMs;
  if (usable <= 0) {
    throw new ConfigError(
      `${n.windowMarginMs}, ${n.duplicateWindowMs}`,
      `the margin (${s.windowMarginMs} ms) leaves nothing of the duplicate-detection window (${s.duplicateWindowMs} ms)`,
    );
  }
  // A send still running when the lease ends could overlap another relay's resend of the same rows, and its copy
  // could reach the broker later than the window check assumes: every batch must end inside the lease.
  if (s.sendTimeoutMs >= s.leaseMs) {
    throw new ConfigError(
      `${n.sendTimeoutMs}, ${n.leaseMs}`,
      `a send may take ${s.sendTimeoutMs} ms, which must be shorter than the lease (${s.leaseMs} ms)`,
    );
  }
  const gap = s.leaseMs + s.pollIntervalMs + s.retryDelayMs;
  if (2 * gap > usable) {
    throw new ConfigError(
      `${n.leaseMs}, ${n.pollIntervalMs}, ${n.retryDelayMs}, ${n.duplicateWindowMs}`,
      `a resend can come ${gap} ms after the first copy, which must fit twice in the duplicate-detection window less its margin (${usable} ms): shorten the lease or lengthen the queue's window`,
    );
  }
  if (s.retentionMs > 0 && s.retentionMs < s.duplicateWindowMs) {
    throw new ConfigError(
      `${n.retentionMs}, ${n.duplicateWindowMs}`,
      "keep sent rows at least as long as the duplicate-detection window, to tell what was sent when",
    );
  }
}
