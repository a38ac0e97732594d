// Mocha's settings for `npm test`. Files run side by side, each in its own process with its own database and
// broker (test/helpers), so the suite's time is mostly the longest chain of waits rather than their sum.
"use strict";
const { existsSync, globSync } = require("node:fs");

// The longest files start first, so the run does not end waiting on one of them started last. Only the order
// depends on this list: a file missing from it still runs, after these.
const longestFirst = [
  "test/infra/templates.test.ts",
  "test/integration/outbox-relay-failures.test.ts",
  "test/integration/worker-lock-held.test.ts",
  "test/integration/dlq-cli.test.ts",
  "test/integration/publish-cli.test.ts",
  "test/integration/worker-retry.test.ts",
  "test/integration/demo-cli.test.ts",
  "test/integration/demo-topic-cli.test.ts",
  "test/property/fuzz-worker.test.ts",
  "test/unit/lazy-loading.test.ts",
  "test/packages/packed.test.ts",
  "test/integration/worker-database-edges.test.ts",
  "test/integration/telemetry-demo.test.ts",
  "test/deploy/appservice-start.test.ts",
  "test/unit/telemetry-setup.test.ts",
];

// The project's tests and the example tests of the team's handlers (handlers/), which `npm test` runs too.
const all = globSync(["test/**/*.test.ts", "handlers/**/*.test.ts"]).sort();
const ordered = [
  ...longestFirst.filter((f) => all.includes(f)),
  ...all.filter((f) => !longestFirst.includes(f)),
];
// Mocha adds the files named on its command line to these, so `npx mocha test/unit/foo.test.ts` (a file, a folder
// or a glob) runs only what it names.
const named = process.argv
  .slice(2)
  .some((arg) => !arg.startsWith("-") && (arg.includes("*") || existsSync(arg)));

module.exports = {
  extension: ["ts"],
  require: ["test/helpers/hooks.ts"],
  timeout: 60_000,
  exit: true,
  reporter: "./test/helpers/reporter.cjs",
  parallel: true,
  // Most of a test's time is waiting (on the broker, the database, a child process), so more files than cores
  // run at once; the tests wait on events, not on the wall clock, so load slows them without failing them.
  jobs: 4,
  ...(named ? {} : { spec: ordered }),
};
