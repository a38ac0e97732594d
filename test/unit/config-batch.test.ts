import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/index.ts";
import { ConfigError } from "../../src/domain/errors.ts";
import { DEFAULT_BATCH_MAX_IN_FLIGHT } from "../../src/worker/batcher.ts";

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  return assert.fail("expected a ConfigError");
}

describe("config: group commit settings", function () {
  it("defaults to auto batches that wait for no timer; 1 turns batches off, and auto may be written in capitals", function () {
    const config = loadConfig({ env: {} });
    assert.equal(config.batchSize, "auto");
    assert.equal(loadConfig({ env: { SBINBOX_BATCH_SIZE: " AUTO " } }).batchSize, "auto");
    assert.equal(loadConfig({ env: { SBINBOX_BATCH_SIZE: "1" } }).batchSize, 1);
    // auto is never refused for the calls in flight: it takes half of them (none below 4).
    assert.equal(loadConfig({ env: { SBINBOX_MAX_CONCURRENT_CALLS: "1" } }).batchSize, "auto");
    assert.equal(config.batchWaitMs, 0);
    assert.equal(config.batchMaxInFlight, DEFAULT_BATCH_MAX_IN_FLIGHT, "the batcher's own default");
    assert.ok(config.batchMaxInFlight > 1, "batches side by side, assigned by key");
  });

  it("takes a batch size up to SBINBOX_MAX_CONCURRENT_CALLS", function () {
    const config = loadConfig({
      env: {
        SBINBOX_BATCH_SIZE: "16",
        SBINBOX_MAX_CONCURRENT_CALLS: "32",
        SBINBOX_BATCH_WAIT_MS: "5",
        SBINBOX_BATCH_MAX_IN_FLIGHT: "2",
      },
    });
    assert.equal(config.batchSize, 16);
    assert.equal(config.batchWaitMs, 5);
    assert.equal(config.batchMaxInFlight, 2);
  });

  it("errors name the bad setting", function () {
    const cases: [NodeJS.ProcessEnv, string, RegExp][] = [
      [{ SBINBOX_BATCH_SIZE: "0" }, "SBINBOX_BATCH_SIZE", /at least 1/],
      [{ SBINBOX_BATCH_SIZE: "eight" }, "SBINBOX_BATCH_SIZE", /must be auto or a whole number/],
      [{ SBINBOX_BATCH_SIZE: "-2" }, "SBINBOX_BATCH_SIZE", /must be auto or a whole number/],
      [
        { SBINBOX_BATCH_SIZE: "1001", SBINBOX_MAX_CONCURRENT_CALLS: "1000" },
        "SBINBOX_BATCH_SIZE",
        /at most 1000/,
      ],
      [{ SBINBOX_BATCH_SIZE: "17" }, "SBINBOX_BATCH_SIZE", /at most SBINBOX_MAX_CONCURRENT_CALLS \(16\)/],
      [{ SBINBOX_BATCH_WAIT_MS: "1001" }, "SBINBOX_BATCH_WAIT_MS", /at most 1000/],
      [{ SBINBOX_BATCH_WAIT_MS: "-1" }, "SBINBOX_BATCH_WAIT_MS", /whole number/],
      [{ SBINBOX_BATCH_MAX_IN_FLIGHT: "0" }, "SBINBOX_BATCH_MAX_IN_FLIGHT", /at least 1/],
      [{ SBINBOX_BATCH_MAX_IN_FLIGHT: "two" }, "SBINBOX_BATCH_MAX_IN_FLIGHT", /whole number/],
    ];
    for (const [env, setting, problem] of cases) {
      const error = configError(() => loadConfig({ env }));
      assert.equal(error.setting, setting, JSON.stringify(env));
      assert.match(error.message, problem);
    }
  });
});
