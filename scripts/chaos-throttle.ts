// The chaos run's throttling phase (scripts/chaos.ts): for a while, the local broker answers about a third of every
// kind of operation with ServerBusy, as a Standard namespace past its credits in a burst (docs/local-broker.md,
// "Throttling"), while the other faults go on. Nothing may be lost, doubled or dead-lettered because of it.
import type { LocalBroker } from "../src/localbroker/broker.ts";
import type { ThrottleKind } from "../src/localbroker/throttle.ts";

/** The share Standard tier meets in a burst, as issue 40 puts it: 30% of each kind. */
export const THROTTLED_SHARE = 0.3;

export class ThrottlePhase {
  private readonly broker: LocalBroker;
  private readonly durationMs: number;
  private readonly out: (line: string) => void;
  private state: "before" | "on" | "done" = "before";

  constructor(broker: LocalBroker, durationMs: number, out: (line: string) => void) {
    this.broker = broker;
    this.durationMs = durationMs;
    this.out = out;
  }

  /** Starts the phase once, when `due` (the run's progress says so) and it has not run yet. */
  startIf(due: boolean): void {
    if (this.state !== "before" || !due || this.durationMs <= 0) return;
    this.state = "on";
    const share = { share: THROTTLED_SHARE };
    this.broker.throttle({ send: share, receive: share, settle: share, management: share });
    this.out(
      `throttling ${THROTTLED_SHARE * 100}% of sends, receives, settlements and management for ${this.durationMs} ms`,
    );
    setTimeout(() => {
      this.broker.throttle({});
      this.state = "done";
      this.out(`throttling over: ${this.summary()}`);
    }, this.durationMs).unref();
  }

  get phases(): number {
    return this.state === "done" ? 1 : 0;
  }

  /** Operations answered ServerBusy, all kinds together. */
  get refused(): number {
    const counts = this.broker.throttleCounts();
    return (Object.keys(counts) as ThrottleKind[]).reduce((sum, kind) => sum + counts[kind].throttled, 0);
  }

  summary(): string {
    const counts = this.broker.throttleCounts();
    return (
      (Object.keys(counts) as ThrottleKind[]).map((k) => `${k} ${counts[k].throttled}`).join(", ") +
      " refused"
    );
  }
}
