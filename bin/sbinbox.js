#!/usr/bin/env node
// The command-line entry point; each subcommand lives in src/cli/<name>.ts and exports `run(argv)`.
// Telemetry starts before the program's own modules load, so every tracer and meter they take is live.
// From a checkout it runs the TypeScript sources (Node strips the types); an installed package has no src/ and
// runs the compiled dist/ (Node does not strip types inside node_modules).
import { existsSync } from "node:fs";
import module from "node:module";
import v8 from "node:v8";

// V8's compiled code (and, from a checkout, the stripped TypeScript) is kept on disk between runs, so a command
// started again does not parse and compile its modules anew; NODE_DISABLE_COMPILE_CACHE=1 turns it off.
module.enableCompileCache?.();

// V8 sizes its young generation only at start-up, and with its default (16 MB semi-spaces) the heap's committed size
// grows with the work done though little is live: `sbinbox worker` draining a backlog reaches 176 MB and more
// (docs/benchmark.md), `sbinbox publish --file` grows with the file (docs/publisher.md, "Memory"). So these two
// commands replace themselves, once, with the same command under a 4 MB semi-space (as `npm start` and App
// Service's start command pass it), however they are started: `npx sbinbox`, the npm bin shim, `node bin/sbinbox.js`.
// process.execve keeps the process: its pid, stdio and signals stay, no parent waits beside it (a child process
// cost a waiting parent of about 46 MB), and an --inspect port is free again for the new image (exec closes the old
// one's socket). Nothing is loaded before it but this file. Windows has no execve: there it runs as it is, with
// V8's sizing. A semi-space flag already given (on the command line or in NODE_OPTIONS) is left as it is.
const argv = process.argv.slice(2);
const SEMI_SPACE = "--max-semi-space-size";
const grows =
  argv[0] === "worker" ||
  (argv[0] === "publish" && argv.some((a) => a === "--file" || a.startsWith("--file=")));
if (
  typeof process.execve === "function" &&
  grows &&
  ![...process.execArgv, ...(process.env.NODE_OPTIONS ?? "").split(/\s+/)].some((a) =>
    a.startsWith(SEMI_SPACE),
  )
) {
  process.execve(
    process.execPath,
    [process.execPath, ...process.execArgv, `${SEMI_SPACE}=4`, process.argv[1], ...argv],
    process.env,
  );
}

// A small young generation is not all: V8 lets the old generation grow to up to four times what survived the last
// full collection before it collects again, and a worker's heap is mostly garbage (about 25 MB live, 70 MB
// committed after 16,000 messages). Growing by a fifth (`--heap-growing-percent=20`) keeps it near what is live:
// more frequent full collections, no limit (unlike --max-old-space-size, nothing crashes when it is reached). Set
// here rather than on the command line: V8 reads it at each collection, and a V8 that lacks the flag ignores it
// instead of refusing to start. A value given on the command line or in NODE_OPTIONS is left as it is.
const GROWING = "--heap-growing-percent";
if (
  grows &&
  ![...process.execArgv, ...(process.env.NODE_OPTIONS ?? "").split(/\s+/)].some((a) => a.startsWith(GROWING))
) {
  v8.setFlagsFromString(`${GROWING}=20`);
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
