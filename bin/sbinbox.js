#!/usr/bin/env node
// The command-line entry point; each subcommand lives in src/cli/<name>.ts and exports `run(argv)`.
// Telemetry starts before the program's own modules load, so every tracer and meter they take is live.
import { shutdownProcessTelemetry, startProcessTelemetry } from "../src/telemetry/register.ts";

if (await startProcessTelemetry()) {
  const { main } = await import("../src/cli/main.ts");
  process.exitCode = await main(process.argv.slice(2));
  // An unreachable collector: exit now instead of waiting out the exporters' retries.
  if (!(await shutdownProcessTelemetry())) process.exit();
} else {
  process.exitCode = 2;
}
