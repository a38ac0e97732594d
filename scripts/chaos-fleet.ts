// The chaos run's worker processes: `sbinbox worker` children that can be SIGKILLed and are restarted, as an
// orchestrator would. A worker that exits on its own is a crash, unless it reported that it failed to start while
// the database was down (its migration cannot run then), which is expected and retried.
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { statsFromLog, withoutSbinboxSettings } from "../src/app/demo-workers.ts";
import { freePort } from "../src/embedded/free-port.ts";
import { KILL_AFTER_PERFORM_LINE } from "./chaos-handlers.ts";

const BIN = fileURLToPath(new URL("../bin/sbinbox.js", import.meta.url));

export interface FleetOptions {
  readonly size: number;
  /** Settings every worker gets (connection strings, queue, timings). */
  readonly env: Record<string, string>;
  /** Extra settings for the first generation only, by slot (the kill-after-commit switch). */
  readonly firstGeneration?: (slot: number) => Record<string, string>;
  /** False while the database is stopped: restarts wait, since a worker cannot migrate then. */
  readonly databaseUp: () => boolean;
  /** Whether the database was down at any time between two instants (ms since epoch). */
  readonly databaseWasDownBetween: (from: number, to: number) => boolean;
  readonly log: (line: string) => void;
  /**
   * How long a worker must have been ready (/readyz 200) before it may be SIGKILLed (default 3 s). On a loaded
   * machine a worker's start-up can take longer than the kill interval; killing workers that never got to work
   * starves the run into a timeout that proves nothing about correctness.
   */
  readonly minUpMs?: number;
}

/** What the worker logs just before the kill-after-commit switch SIGKILLs it (src/app/app.ts). */
const KILL_AFTER_COMMIT_LINE = "killing the process between commit and complete";

interface Member {
  readonly slot: number;
  readonly name: string;
  readonly child: ChildProcess;
  readonly port: number;
  readonly startedAt: number;
  /** When its /readyz first said ready (database and Service Bus reached, receiving); undefined until then. */
  readyAt: number | undefined;
  readonly exited: Promise<void>;
  stderrTail: string;
  /** Set when this fleet sent the SIGKILL. */
  killedByUs: boolean;
}

export interface FleetCounts {
  /** Worker processes that died by SIGKILL: ours, and the fault switch's own. */
  kills: number;
  /** Of those, the ones a fault switch made the worker send itself, by switch (told apart by its last log line). */
  selfKills: number;
  killedAfterCommit: number;
  killedAfterPerform: number;
  /** Kill rounds skipped because no live worker had been up long enough. */
  killsSkipped: number;
  /** Exits while the database was up: each is a failure of the run. */
  crashes: number;
  /** Start-ups that failed because the database was down; retried. */
  failedStarts: number;
  starts: number;
}

export class WorkerFleet {
  private readonly options: FleetOptions;
  private readonly members = new Map<number, Member>();
  private readonly pending = new Set<number>();
  private stopping = false;
  private generation = 0;
  readonly counts: FleetCounts = {
    kills: 0,
    selfKills: 0,
    killedAfterCommit: 0,
    killedAfterPerform: 0,
    killsSkipped: 0,
    crashes: 0,
    failedStarts: 0,
    starts: 0,
  };
  readonly crashReports: string[] = [];
  /** Duplicates and transient failures reported by workers that have exited, from their "stopped" log line. */
  private readonly stats = { duplicate: 0, failed: 0, retriesWaited: 0 };

  constructor(options: FleetOptions) {
    this.options = options;
  }

  async start(): Promise<void> {
    for (let slot = 0; slot < this.options.size; slot += 1) await this.spawn(slot, true);
  }

  get live(): number {
    return this.members.size;
  }

  get pids(): number[] {
    return [...this.members.values()].map((m) => m.child.pid ?? 0);
  }

  /**
   * SIGKILLs one live worker chosen at random among those that have been ready for at least `minUpMs`; it is
   * restarted as soon as the database allows. Undefined (and counted as skipped) when none qualifies.
   */
  killOne(random: () => number): string | undefined {
    const since = Date.now() - (this.options.minUpMs ?? 3_000);
    const live = [...this.members.values()].filter(
      (m) => !m.killedByUs && m.readyAt !== undefined && m.readyAt <= since,
    );
    if (live.length === 0) {
      this.counts.killsSkipped += 1;
      return undefined;
    }
    const victim = live[Math.floor(random() * live.length)]!;
    victim.killedByUs = true;
    victim.child.kill("SIGKILL");
    return `${victim.name} (pid ${victim.child.pid})`;
  }

  /** Starts the workers whose restart waited for the database. */
  async restartPending(): Promise<void> {
    if (!this.options.databaseUp()) return;
    for (const slot of [...this.pending]) {
      this.pending.delete(slot);
      await this.spawn(slot, false);
    }
  }

  /**
   * Duplicates and transient failures as the workers that stopped with SIGTERM logged them on the way out
   * (/readyz is public and carries no counters). A lower bound: a SIGKILLed worker logs nothing.
   */
  readStats(): { duplicate: number; failed: number; retriesWaited: number } {
    return { ...this.stats };
  }

  /**
   * SIGTERM to every live worker; resolves when all have exited. Non-zero exits are reported as crashes. A worker
   * still loading its modules has no signal handler yet, so it is first given up to 15 s to answer on HTTP (its
   * handler is in place by then), as an orchestrator waits for a start-up probe before it stops an instance.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    this.pending.clear();
    const members = [...this.members.values()];
    await Promise.all(members.map((m) => answers(m, 15_000)));
    for (const m of members) m.child.kill("SIGTERM");
    await Promise.all(members.map((m) => m.exited));
  }

  /** Stopped from outside: no restart from now on, every live worker SIGKILLed. */
  halt(): void {
    this.stopping = true;
    this.pending.clear();
    this.killAll();
  }

  /** Last resort on the way out: nothing outlives the run. */
  killAll(): void {
    for (const m of this.members.values()) m.child.kill("SIGKILL");
  }

  private async spawn(slot: number, first: boolean): Promise<void> {
    if (this.stopping) return;
    const port = await freePort();
    this.generation += 1;
    const name = `worker-${slot + 1}.${this.generation}`;
    const extra = first ? (this.options.firstGeneration?.(slot) ?? {}) : {};
    const child = spawn(process.execPath, [BIN, "worker"], {
      env: {
        ...withoutSbinboxSettings(process.env),
        ...this.options.env,
        // Info, for the final "stopped" line that carries the worker's counters.
        SBINBOX_LOG_LEVEL: "info",
        ...extra,
        PORT: String(port),
      },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let exited!: () => void;
    const member: Member = {
      slot,
      name,
      child,
      port,
      startedAt: Date.now(),
      readyAt: undefined,
      exited: new Promise<void>((resolve) => (exited = resolve)),
      stderrTail: "",
      killedByUs: false,
    };
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (d: string) => (member.stderrTail = (member.stderrTail + d).slice(-3000)));
    // 'close', not 'exit': 'exit' can come before the last stderr data is read, and the fault switch's last line
    // (which switch fired) and the "stopped" counters are in it.
    child.on("close", (code, signal) => {
      this.onExit(member, code, signal);
      exited();
    });
    this.members.set(slot, member);
    this.counts.starts += 1;
    void becomesReady(member).then((ok) => {
      if (ok) member.readyAt = Date.now();
    });
  }

  private onExit(member: Member, code: number | null, signal: NodeJS.Signals | null): void {
    this.members.delete(member.slot);
    const stats = statsFromLog(member.stderrTail);
    this.stats.duplicate += stats.duplicate;
    this.stats.failed += stats.failed;
    this.stats.retriesWaited += stats.retriesWaited;
    if (this.stopping) {
      // A worker restarted just before the end can get the SIGTERM while Node is still loading it, before its
      // handlers exist: the default action ends it, having done nothing. Not a crash.
      const beforeItsHandlers = signal === "SIGTERM" && member.stderrTail === "";
      if (code !== 0 && !beforeItsHandlers) {
        this.counts.crashes += 1;
        this.crashReports.push(
          `${member.name} exited with ${code ?? signal} after SIGTERM: ${member.stderrTail}`,
        );
      }
      return;
    }
    if (signal === "SIGKILL") {
      this.counts.kills += 1;
      if (!member.killedByUs) {
        this.counts.selfKills += 1;
        const which = member.stderrTail.includes(KILL_AFTER_PERFORM_LINE)
          ? "after perform"
          : member.stderrTail.includes(KILL_AFTER_COMMIT_LINE)
            ? "after commit"
            : "unknown switch";
        if (which === "after perform") this.counts.killedAfterPerform += 1;
        if (which === "after commit") this.counts.killedAfterCommit += 1;
        this.options.log(`${member.name} killed itself (fault switch: ${which})`);
      }
    } else if (
      member.stderrTail.includes("failed to start") &&
      this.options.databaseWasDownBetween(member.startedAt, Date.now())
    ) {
      this.counts.failedStarts += 1;
    } else {
      this.counts.crashes += 1;
      this.crashReports.push(`${member.name} exited with ${code ?? signal}: ${member.stderrTail}`);
      this.options.log(`${member.name} CRASHED (exit ${code ?? signal}); restarting it`);
    }
    this.pending.add(member.slot);
    void this.restartPending();
  }
}

/**
 * Resolves when the worker answers on its HTTP port (true), has exited, or `timeoutMs` has passed (false).
 */
async function answers(member: Member, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  let gone = false;
  void member.exited.then(() => (gone = true));
  while (!gone && Date.now() < deadline) {
    try {
      await fetch(`http://127.0.0.1:${member.port}/healthz`, { signal: AbortSignal.timeout(1_000) });
      return true;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  return false;
}

/** Resolves true once the worker's /readyz answers 200, false if it exits first. */
async function becomesReady(member: Member): Promise<boolean> {
  let gone = false;
  void member.exited.then(() => (gone = true));
  while (!gone) {
    try {
      const res = await fetch(`http://127.0.0.1:${member.port}/readyz`, {
        signal: AbortSignal.timeout(2_000),
      });
      await res.body?.cancel();
      if (res.ok) return true;
    } catch {
      // Not listening yet.
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return false;
}
