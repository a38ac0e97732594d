import type { Settlement } from "../servicebus/receiver.ts";
import { SettlementUnconfirmedError } from "../servicebus/settlement-guard.ts";
import { isNoAnswer, serviceBusCode, type LinkProbe } from "../servicebus/link-probe.ts";
import type { Logger } from "../telemetry/logger.ts";
import { progressMetrics } from "../telemetry/progress-metrics.ts";
import { PROGRESS_DEFAULTS } from "../domain/progress-defaults.ts";

export { PROGRESS_DEFAULTS };

/** Whether the worker's connection to Service Bus still carries anything: the state word on /readyz. */
export type LinkState = "ok" | "silent" | "refused";

export interface ProgressOptions {
  /** With nothing heard for this long, the worker asks the broker a question (a peek) on its connection. */
  readonly quietMs?: number;
  /** How long that question may take before it counts as unanswered. */
  readonly probeTimeoutMs?: number;
  /** Silent: nothing heard for this long, and a question asked since went unanswered. */
  readonly silentAfterMs?: number;
  /** Back to ok: answers heard throughout this long, with no unanswered question between. */
  readonly recoverAfterMs?: number;
}

/** How often the probe asks while the link is silent or recovering. */
const RECOVERY_PROBE_MS = 1_000;

export interface ProgressMonitorOptions extends ProgressOptions {
  readonly probe: LinkProbe;
  readonly logger: Logger;
  /** The entity path, for the metric's attributes. */
  readonly queue: string;
}

/**
 * Tells a silent link from an idle queue. A connection that carries nothing (packets dropped, no reset) looks
 * like an empty queue to the SDK: the receive link stays "open", nothing arrives, and rhea notices only after
 * twice its 60 s idle time-out. So the worker counts as heard from everything the broker sends back (a message
 * received, a settlement answered, even refused) and, when nothing came for `quietMs`, asks a question on the
 * same connection (a one-message peek). The link is silent when nothing was heard for `silentAfterMs` and a
 * question asked since went unanswered (or a settlement waited out its lock); it is ok again after answers for
 * `recoverAfterMs`. An idle queue answers every question, so it never turns silent, and a link that answers only
 * now and then does not flap.
 */
export class ProgressMonitor {
  private readonly options: ProgressMonitorOptions;
  private readonly quietMs: number;
  private readonly probeTimeoutMs: number;
  private readonly silentAfterMs: number;
  private readonly recoverAfterMs: number;
  private current: LinkState = "ok";
  private lastHeard = Date.now();
  private lastUnanswered: number | undefined;
  private recoveringSince: number | undefined;
  private lastProbeEnd = 0;
  /** Since when the receive link has given only errors (no message received since). */
  private refusedSince: number | undefined;
  private receiveLinkOpen: (() => boolean | undefined) | undefined;
  private lastReceiveError: unknown;
  private probing = false;
  private timer: NodeJS.Timeout | undefined;
  private stopObserving: (() => void) | undefined;

  constructor(options: ProgressMonitorOptions) {
    this.options = options;
    this.quietMs = options.quietMs ?? PROGRESS_DEFAULTS.quietMs;
    this.probeTimeoutMs = options.probeTimeoutMs ?? PROGRESS_DEFAULTS.probeTimeoutMs;
    this.silentAfterMs = options.silentAfterMs ?? PROGRESS_DEFAULTS.silentAfterMs;
    this.recoverAfterMs = options.recoverAfterMs ?? PROGRESS_DEFAULTS.recoverAfterMs;
  }

  get state(): LinkState {
    return this.current;
  }

  /** Milliseconds since the broker was last heard from on the worker's connection. */
  get silenceMs(): number {
    return Date.now() - this.lastHeard;
  }

  start(): void {
    if (this.timer) return;
    this.lastHeard = Date.now();
    const tick = Math.min(1_000, Math.max(20, Math.min(this.quietMs, this.recoverAfterMs) / 5));
    this.timer = setInterval(() => this.tick(), tick);
    this.timer.unref();
    this.stopObserving = progressMetrics.observe(this.options.queue, () => ({
      silenceMs: this.silenceMs,
      state: this.current,
    }));
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    this.stopObserving?.();
    await this.options.probe.close().catch(() => undefined);
  }

  /** The broker sent something back on the worker's connection. */
  heard(): void {
    const now = Date.now();
    this.lastHeard = now;
    if (this.current !== "silent") return;
    this.recoveringSince ??= now;
    if (now - this.recoveringSince < this.recoverAfterMs) return;
    this.current = "ok";
    this.recoveringSince = undefined;
    this.options.logger.info("Service Bus answers again on the worker's connection: ready");
  }

  /** A message arrived on the receive link: the broker is heard, and receiving is not refused. */
  received(): void {
    this.receiving();
    this.heard();
  }

  private receiving(): void {
    this.refusedSince = undefined;
    if (this.current !== "refused") return;
    this.current = "ok";
    this.options.logger.info("Service Bus opens the worker's receive link again: ready");
  }

  /**
   * The SDK's processError for the receive link (errorSource "receive"). Receive errors with the link still not
   * open `silentAfterMs` later, and nothing received since, are "refused": a receive from a queue that forwards,
   * say, which the broker refuses while it answers the probe's peeks. A link the SDK opened again after a drop
   * clears it; when the SDK does not say whether the link is open, errors alone never turn readiness.
   */
  receiveError(error: unknown, linkOpen: () => boolean | undefined): void {
    this.refusedSince ??= Date.now();
    this.receiveLinkOpen = linkOpen;
    this.lastReceiveError = error;
    this.evaluateRefused();
  }

  private evaluateRefused(): void {
    if (this.refusedSince === undefined) return;
    const open = this.receiveLinkOpen?.();
    if (open === true) return this.receiving();
    if (open === undefined) return;
    const now = Date.now();
    if (this.current !== "ok" || now - this.refusedSince < this.silentAfterMs) return;
    this.current = "refused";
    const error = this.lastReceiveError;
    this.options.logger.warn(
      "Service Bus refuses the worker's receive link: only errors, nothing received; not ready until it delivers",
      {
        refusedMs: now - this.refusedSince,
        code: serviceBusCode(error),
        error: error instanceof Error ? error.message : String(error),
      },
    );
  }

  /** What a settlement tells: an answer is the broker heard; waiting out the lock, or no answer, is silence. */
  settled(result: Settlement): void {
    if (result.settled) return this.heard();
    const error = result.error;
    if (error instanceof SettlementUnconfirmedError) {
      if (error.reason === "lock-expired") this.unanswered();
      return;
    }
    // The SDK's local errors (a lock it holds as lost, its own time-out) never reached the broker: not an answer.
    if (isNoAnswer(error)) return;
    this.heard();
  }

  private unanswered(): void {
    this.lastUnanswered = Date.now();
    this.recoveringSince = undefined;
    this.evaluate();
  }

  private evaluate(): void {
    const now = Date.now();
    if (
      this.current === "ok" &&
      this.lastUnanswered !== undefined &&
      this.lastUnanswered >= this.lastHeard &&
      now - this.lastHeard >= this.silentAfterMs
    ) {
      this.current = "silent";
      this.recoveringSince = undefined;
      this.options.logger.warn(
        "Service Bus silent on the worker's connection: nothing received or answered; not ready until it answers again",
        { silentMs: now - this.lastHeard },
      );
    }
  }

  private tick(): void {
    this.evaluate();
    this.evaluateRefused();
    if (this.probing) return;
    const since = Date.now() - Math.max(this.lastHeard, this.lastProbeEnd);
    const every =
      this.current === "silent" || this.recoveringSince !== undefined
        ? Math.min(this.quietMs, this.recoverAfterMs, RECOVERY_PROBE_MS)
        : this.quietMs;
    if (since >= every) void this.ask();
  }

  private async ask(): Promise<void> {
    this.probing = true;
    let answered = true;
    try {
      await this.options.probe.check(this.probeTimeoutMs);
    } catch (error) {
      answered = false;
      this.options.logger.debug("Service Bus did not answer the worker's probe", { error });
    }
    this.probing = false;
    this.lastProbeEnd = Date.now();
    if (this.timer === undefined) return;
    if (answered) this.heard();
    else this.unanswered();
  }
}
