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

// `sbinbox publish --file` streams a file of any size. With V8's default young generation the heap's committed
// size grows with the file though little is live (docs/publisher.md, "Memory"), and V8 sizes the young generation
// only at start-up, so that command runs itself again, once, with a 4 MB semi-space (as `npm start` runs the
// worker). A semi-space flag already given (on the command line or in NODE_OPTIONS) is left as it is.
const argv = process.argv.slice(2);
const SEMI_SPACE = "--max-semi-space-size";
if (
  argv[0] === "publish" &&
  argv.some((a) => a === "--file" || a.startsWith("--file=")) &&
  ![...process.execArgv, ...(process.env.NODE_OPTIONS ?? "").split(/\s+/)].some((a) =>
    a.startsWith(SEMI_SPACE),
  )
) {
  const { spawn } = await import("node:child_process");
  const child = spawn(process.execPath, [...process.execArgv, `${SEMI_SPACE}=4`, process.argv[1], ...argv], {
    stdio: "inherit",
  });
  // A terminal's Ctrl-C reaches both processes; a signal sent to this one alone is passed on.
  const forward = (signal) => child.kill(signal);
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(signal, forward);
  const [code, signal] = await new Promise((resolve) => child.on("exit", (c, s) => resolve([c, s])));
  if (signal) {
    for (const s of ["SIGINT", "SIGTERM", "SIGHUP"]) process.removeListener(s, forward);
    process.kill(process.pid, signal);
  }
  process.exit(code ?? 1);
}

const fromSource = existsSync(new URL("../src/cli/main.ts", import.meta.url));
const entry = (path) =>
  new URL(fromSource ? `../src/${path}.ts` : `../dist/${path}.js`, import.meta.url).href;
const { shutdownProcessTelemetry, startProcessTelemetry } = await import(entry("telemetry/register"));

if (await startProcessTelemetry()) {
  const { main } = await import(entry("cli/main"));
  process.exitCode = await main(argv);
  // An unreachable collector: exit now instead of waiting out the exporters' retries.
  if (!(await shutdownProcessTelemetry())) process.exit();
} else {
  process.exitCode = 2;
}
