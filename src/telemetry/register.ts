import { ConfigError } from "../domain/errors.ts";
import { within } from "../domain/within.ts";
import { startTelemetry, type Telemetry } from "./setup.ts";

/**
 * The process-wide telemetry of the `sbinbox` command. bin/sbinbox.js starts it before it loads any of the
 * program's own modules, so every tracer and meter they take comes from the configured SDK, and shuts it down
 * after the command returns, so the last spans and metrics are flushed.
 */
let running: Telemetry | undefined;

/** Returns false (after printing the reason) when an OTEL_* or APPLICATIONINSIGHTS_* setting is wrong. */
export async function startProcessTelemetry(): Promise<boolean> {
  if (running) return true;
  try {
    running = await startTelemetry();
    return true;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`sbinbox: ${error.message}\n`);
    return false;
  }
}

/**
 * Flushes and stops the exporters. Bounded, so an unreachable collector cannot hold the exit: returns false when
 * the time ran out, and the caller should then exit at once rather than wait for the exporters' retries.
 */
export async function shutdownProcessTelemetry(timeoutMs = 3_000): Promise<boolean> {
  const telemetry = running;
  running = undefined;
  if (!telemetry?.active) return true;
  try {
    return await within(telemetry.shutdown(), timeoutMs, { unref: true });
  } catch (error) {
    process.stderr.write(`sbinbox: telemetry shutdown failed: ${String(error)}\n`);
    return true;
  }
}
