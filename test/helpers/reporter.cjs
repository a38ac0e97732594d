// Mocha's spec output, closed by the plain "N passed, N failed" line that CI reads.
"use strict";
const Mocha = require("mocha");
const { EVENT_RUN_END } = Mocha.Runner.constants;

class SummaryReporter extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    runner.once(EVENT_RUN_END, () => {
      const { passes, failures, pending } = runner.stats ?? this.stats;
      const skipped = pending > 0 ? `, ${pending} skipped` : "";
      process.stdout.write(`${passes} passed, ${failures} failed${skipped}\n`);
    });
  }
}

module.exports = SummaryReporter;
