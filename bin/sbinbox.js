#!/usr/bin/env node
// The command-line entry point; each subcommand lives in src/cli/<name>.ts and exports `run(argv)`.
// Telemetry starts before the program's own modules load, so every tracer and meter they take is live.
// From a checkout it runs the TypeScript sources (Node strips the types); an installed package has no src/ and
// runs the compiled dist/ (Node does not strip types inside node_modules).
import { existsSync } from "node:fs";
import module from "node:module";

// V8's compiled code (and, from a checkout, the stripped TypeScript) is kept on disk between runs, so a command
// started again does not parse and compile its modules anew; NODE_DISABLE_COMPILE_CACHE=1 turns it off.
module.enableCompileCache?.();

const fromSource = existsSync(new URL("../src/cli/main.ts", import.meta.url));
const entry = (path) =>
  new URL(fromSource ? `../src/${path}.ts` : `../dist/${path}.js`, import.meta.url).href;
const { shutdownProcessTelemetry, startProcessTelemetry } = await import(entry("telemetry/register"));

if (await startProcessTelemetry()) {
  const { main } = await import(entry("cli/main"));
  process.exitCode = await main(process.argv.slice(2));
  // An unreachable collector: exit now instead of waiting out the exporters' retries.
  if (!(await shutdownProcessTelemetry())) process.exit();
} else {
  process.exitCode = 2;
}
