import type { ReadinessReport } from "../http/health.ts";
import type { OutboxSender } from "../servicebus/outbox-sender.ts";
import { relayMetrics } from "../telemetry/outbox-metrics.ts";
import { checkRelaySettings, DEFAULT_RELAY_SETTINGS, type RelaySettings } from "./settings.ts";
import type { OutboxStatus, OutboxStore } from "./store.ts";

/** A store that can wake the relay at once when an enqueue commits (PostgreSQL LISTEN/NOTIFY). */
interface ListeningStore {
  listen(onNotify: () => void, onLost: (error: Error) => void): Promise<() => Promise<void>>;
}

export interface RelayOptions extends Partial<RelaySettings> {
  readonly store: OutboxStore & Partial<ListeningStore>;
  readonly sender: OutboxSender;
  /** Called with every failure the relay survives (database, broker); the relay keeps going. */
  readonly onError?: (error: unknown, during: string) => void;
  /** Test seam: runs between the send and the mark, where a crash makes a resend. */
  readonly afterSend?: (
    sentIds: readonly string[],
    sentMessageIds: readonly string[],
  ) => Promise<void> | void;
}

export interface RelayCounters {
  sent: number;
  setAside: number;
  /** Batches the broker or network failed as a whole (the rows wait for the next try). */
  failedSends: number;
}

export interface Relay {
  readonly counters: Readonly<RelayCounters>;
  /** The last status read (undefined until the first read, or after a failed one). */
  readonly status: OutboxStatus | undefined;
  /** Look for rows now instead of at the next poll. */
  wake(): void;
  /** /readyz: not ready while the database cannot be read; `outbox: "stale"` reports stale rows without failing. */
  readiness(): Promise<ReadinessReport>;
  /** Stops claiming, lets the batch in flight finish, stops listening; leaves store and sender open. */
  stop(): Promise<void>;
}

/**
 * Starts the relay: claims unsent rows in Id order, sends them with their derived MessageIds, marks them sent;
 * sets aside rows the broker refuses for good; deletes sent rows after the retention. Validates its settings first
 * (a ConfigError names them). One function, so a start-up wait can be put in front of it later.
 */
export async function startRelay(options: RelayOptions): Promise<Relay> {
  const given = definedOnly(options);
  const s: RelaySettings = {
    ...DEFAULT_RELAY_SETTINGS,
    // In-process with a short lease and no send timeout given: half the lease, so the default fits.
    sendTimeoutMs: Math.min(
      DEFAULT_RELAY_SETTINGS.sendTimeoutMs,
      Math.floor((given.leaseMs ?? Infinity) / 2),
    ),
    ...given,
  };
  checkRelaySettings(s);
  const { store, sender } = options;
  const onError = options.onError ?? (() => undefined);
  const usableWindowMs = s.duplicateWindowMs - s.windowMarginMs;
  const counters: RelayCounters = { sent: 0, setAside: 0, failedSends: 0 };
  let status: OutboxStatus | undefined;
  let running = true;
  let wakeUp: (() => void) | undefined;
  let woken = false;
  const wake = (): void => {
    woken = true;
    wakeUp?.();
  };
  let stopPause: (() => void) | undefined;
  /**
   * Waits `ms`. A wake (NOTIFY, wake()) ends an idle pause; only stop() ends the back-off after a failure:
   * otherwise every commit during an outage would claim and try more rows, and a wake during the back-off
   * would claim the rows behind the released ones, sending them out of order.
   */
  const pause = (ms: number, wakeable: boolean): Promise<void> =>
    new Promise((resolve) => {
      if ((wakeable && woken) || !running) return resolve();
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        wakeUp = undefined;
        stopPause = undefined;
        resolve();
      }
      if (wakeable) wakeUp = done;
      stopPause = done;
    });

  let stopListening: (() => Promise<void>) | undefined;
  let listening: Promise<void> | undefined;
  let relistenTimer: NodeJS.Timeout | undefined;
  let relistenDelayMs = 0;
  /** The last loop failure was the database's (not a send's): a working LISTEN proves it is back. */
  let lastFailureOnDatabase = false;
  /**
   * LISTEN again after a lost connection or a failed LISTEN, on its own back-off (not at the next poll, which
   * may be minutes away); once it holds again, look for rows committed meanwhile at once.
   */
  const relistenLater = (): void => {
    if (!running || relistenTimer) return;
    relistenDelayMs = Math.min(5_000, Math.max(100, relistenDelayMs * 2));
    relistenTimer = setTimeout(() => {
      relistenTimer = undefined;
      listen();
    }, relistenDelayMs);
    relistenTimer.unref();
  };
  const listen = (): void => {
    if (!store.listen || !running || listening || stopListening) return;
    const again = relistenDelayMs > 0;
    listening = store
      .listen(wake, (error) => {
        stopListening = undefined;
        onError(error, "listen");
        wake(); // the loop claims (and so finds out) now, and polls until LISTEN is back
        relistenLater();
      })
      .then((stop) => {
        if (!running) return void stop();
        stopListening = stop;
        if (again) {
          relistenDelayMs = 0;
          wake();
          // A database failure's back-off may end now; a send failure's may not (the released rows' order).
          if (lastFailureOnDatabase) stopPause?.();
        }
      })
      .catch((error: unknown) => {
        onError(error, "listen");
        relistenLater();
      })
      .finally(() => {
        listening = undefined;
      });
  };

  async function cycle(): Promise<"more" | "idle" | "failed"> {
    const claimedAt = Date.now();
    const rows = await store.claim(s.batchSize, s.leaseMs, usableWindowMs);
    if (rows.length === 0) return "idle";
    // Every batch ends inside the lease (checkRelaySettings: sendTimeoutMs < leaseMs), so no other relay resends a
    // row while a copy of it may still be on its way, and the window check's bound holds.
    const leaseEnds = claimedAt + s.leaseMs;
    const report = await sender.send(rows, { startBy: leaseEnds - s.sendTimeoutMs, abortAt: leaseEnds });
    await options.afterSend?.(
      report.sent,
      rows.filter((r) => report.sent.includes(r.id)).map((r) => r.messageId),
    );
    await store.markSent(report.sent);
    for (const { id, error } of report.setAside) await store.setAside(id, error);
    counters.sent += report.sent.length;
    counters.setAside += report.setAside.length;
    relayMetrics.recordSent(sender.queue, report.sent.length);
    relayMetrics.recordSetAside(sender.queue, report.setAside.length);
    if (report.retry.length > 0 && report.error === undefined) {
      // The lease ran short before these were started (a slow broker): not a failure, claim them again now.
      await store.release(
        report.retry,
        0,
        rows.filter((r) => r.firstTry && report.notReached.includes(r.id)).map((r) => r.id),
      );
      return "more";
    }
    if (report.retry.length > 0) {
      counters.failedSends += 1;
      onError(report.error, "send");
      // Rows that provably never reached the broker (a failure that proves it, or not started in time) leave the
      // window unstarted if on their first try; a key whose send may have reached it starts the window of its rows.
      const neverSent = rows.filter((r) => r.firstTry && report.notReached.includes(r.id)).map((r) => r.id);
      await store.release(report.retry, s.retryDelayMs, neverSent);
      return "failed";
    }
    // A key's next row becomes claimable only now that its head is marked sent: look again at once, not at the poll.
    const headsSent = rows.some((r) => r.sessionId && report.sent.includes(r.id));
    return rows.length === s.batchSize || headsSent ? "more" : "idle";
  }

  const loop = (async () => {
    let failures = 0;
    while (running) {
      listen();
      woken = false;
      let result: "more" | "idle" | "failed";
      try {
        result = await cycle();
        lastFailureOnDatabase = false;
      } catch (error) {
        onError(error, "relay");
        result = "failed";
        lastFailureOnDatabase = true;
      }
      if (result === "failed") {
        failures += 1;
        // Never shorter than retryDelayMs, the released rows' lock: the next claim finds them first again.
        const backoff = Math.min(30_000, s.retryDelayMs * 2 ** Math.min(failures - 1, 10));
        await pause(Math.max(s.retryDelayMs, backoff), false);
        continue;
      }
      failures = 0;
      if (result === "idle") await pause(s.pollIntervalMs, true);
    }
  })();

  let reportedStale = 0;
  async function readStatus(): Promise<void> {
    try {
      status = await store.status(usableWindowMs);
      // Stale rows wait for an operator, not for a restart: they go to the log (once per rise), the
      // sbinbox.outbox.stale gauge and status.stale, never to readiness, which would take the instance out.
      if (status.stale > reportedStale)
        onError(
          new Error(
            `${status.stale} unsent outbox rows were first tried before the duplicate-detection window: not sent until an operator decides (docs/outbox.md)`,
          ),
          "stale",
        );
      reportedStale = status.stale;
    } catch (error) {
      status = undefined;
      onError(error, "status");
    }
  }
  await readStatus();
  const statusTimer = setInterval(() => void readStatus(), s.statusIntervalMs);
  statusTimer.unref();
  const stopObserving = relayMetrics.observeStatus(sender.queue, () => status);

  let lastCleanup = Promise.resolve();
  const cleanupTimer =
    s.retentionMs > 0 && s.cleanupIntervalMs > 0
      ? setInterval(() => {
          lastCleanup = store.cleanup(s.retentionMs).then(
            () => undefined,
            (error: unknown) => onError(error, "cleanup"),
          );
        }, s.cleanupIntervalMs)
      : undefined;
  cleanupTimer?.unref();

  return {
    counters,
    get status() {
      return status;
    },
    wake,
    async readiness(): Promise<ReadinessReport> {
      await readStatus();
      // Words only: /readyz is public. The counts are in `status`, the metrics and the log.
      if (!status) return { ready: false, status: "running", database: "unreachable" };
      return {
        // Stale rows do not make the relay unready: a probe failing for them would only have the platform
        // replace a healthy instance, and a new one cannot send them either.
        ready: true,
        status: "running",
        database: "ok",
        // Rows first tried longer ago than the duplicate-detection window allows for a resend (docs/outbox.md).
        outbox: status.stale > 0 ? "stale" : "ok",
      };
    },
    async stop() {
      running = false;
      wake();
      stopPause?.();
      clearTimeout(relistenTimer);
      clearInterval(statusTimer);
      if (cleanupTimer) clearInterval(cleanupTimer);
      stopObserving();
      await loop;
      await lastCleanup;
      await listening;
      await stopListening?.();
      stopListening = undefined;
    },
  };
}

function definedOnly(options: Partial<RelaySettings>): Partial<RelaySettings> {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(DEFAULT_RELAY_SETTINGS))
    if ((options as Record<string, unknown>)[key] !== undefined)
      out[key] = (options as Record<string, unknown>)[key];
  return out;
}

export {
  checkRelaySettings,
  DEFAULT_RELAY_SETTINGS,
  RELAY_SETTING_NAMES,
  type RelaySettings,
} from "./settings.ts";
