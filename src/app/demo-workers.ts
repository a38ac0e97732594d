import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { freePort } from "../embedded/free-port.ts";
import { writesTelemetryToConsole } from "../telemetry/setup.ts";

const BIN = fileURLToPath(new URL("../../bin/sbinbox.js", import.meta.url));

export interface WorkerProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly port: number;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderrTail: string;
}

/** A `sbinbox worker` process on a free port with these settings, its stderr's tail kept for its counters. */
export async function spawnWorker(name: string, settings: Record<string, string>): Promise<WorkerProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, [BIN, "worker"], {
    env: {
      ...withoutSbinboxSettings(process.env),
      ...settings,
      // Info, for the final "stopped" line that carries the counters the report shows.
      SBINBOX_LOG_LEVEL: "info",
      PORT: String(port),
    },
    // With OTEL_TRACES_EXPORTER=console the workers' spans are the point: pass their stdout through.
    stdio: ["ignore", writesTelemetryToConsole() ? "inherit" : "ignore", "pipe"],
  });
  const worker: WorkerProcess = {
    name,
    child,
    port,
    stderrTail: "",
    exited: new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal }))),
  };
  child.stderr
    .setEncoding("utf8")
    .on("data", (d: string) => (worker.stderrTail = (worker.stderrTail + d).slice(-4000)));
  return worker;
}

export function withoutSbinboxSettings(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([k]) => !k.startsWith("SBINBOX_") && k !== "PORT"));
}

export interface WorkerStats {
  readonly duplicate: number;
  readonly failed: number;
  readonly retriesScheduled: number;
  /** Retries waited out in place (session mode's only kind). */
  readonly retriesWaited: number;
}

/** The worker's counters from its final "stopped" log line; zeros when it has none (it was killed). */
export function statsFromLog(stderr: string): WorkerStats {
  const line = stderr
    .split("\n")
    .reverse()
    .find((l) => l.includes('"msg":"stopped"'));
  try {
    const record = JSON.parse(line ?? "{}") as Partial<WorkerStats>;
    return {
      duplicate: record.duplicate ?? 0,
      failed: record.failed ?? 0,
      retriesScheduled: record.retriesScheduled ?? 0,
      retriesWaited: record.retriesWaited ?? 0,
    };
  } catch {
    return { duplicate: 0, failed: 0, retriesScheduled: 0, retriesWaited: 0 };
  }
}
