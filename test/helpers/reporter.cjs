// Mocha's spec output, then the ten slowest tests, closed by the plain "N passed, N failed" line that CI reads.
"use strict";
const Mocha = require("mocha");
const { EVENT_RUN_END, EVENT_TEST_PASS, EVENT_TEST_FAIL } = Mocha.Runner.constants;

const SLOWEST = 10;

class SummaryReporter extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    const timed = [];
    const record = (test) => {
      if (typeof test.duration === "number")
        timed.push({ ms: test.duration, title: test.fullTitle(), file: test.file });
    };
    runner.on(EVENT_TEST_PASS, record);
    runner.on(EVENT_TEST_FAIL, record);
    runner.once(EVENT_RUN_END, () => {
      const { passes, failures, pending } = runner.stats ?? this.stats;
      const slowest = timed.sort((a, b) => b.ms - a.ms).slice(0, SLOWEST);
      if (slowest.length > 0) {
        process.stdout.write(`\nThe ${slowest.length} slowest tests:\n`);
        for (const t of slowest) {
          const file = t.file ? ` [${require("node:path").relative(process.cwd(), t.file)}]` : "";
          process.stdout.write(`  ${(t.ms / 1000).toFixed(1).padStart(6)} s  ${t.title}${file}\n`);
        }
      }
      // For choosing the order of files: SBINBOX_TEST_TIMES=path writes each file's summed test time (ms).
      if (process.env.SBINBOX_TEST_TIMES) {
        const perFile = {};
        for (const t of timed) if (t.file) perFile[t.file] = (perFile[t.file] ?? 0) + t.ms;
        require("node:fs").writeFileSync(process.env.SBINBOX_TEST_TIMES, JSON.stringify(perFile, null, 1));
      }
      const skipped = pending > 0 ? `, ${pending} skipped` : "";
      process.stdout.write(`${passes} passed, ${failures} failed${skipped}\n`);
    });
  }
}

module.exports = SummaryReporter;
