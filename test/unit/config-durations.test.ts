import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { MAX_HOURS, MAX_TIMER_MS, settings, type SettingName } from "../../src/config/schema.ts";
import { ConfigError } from "../../src/domain/errors.ts";

const durations = (Object.keys(settings) as SettingName[]).filter((n) => /_(MS|HOURS)$/.test(n));

function errorFor(env: Record<string, string>): ConfigError | undefined {
  try {
    loadConfig({ env });
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  return undefined;
}

describe("config: every duration has an upper bound", function () {
  it("finds the duration settings (so the checks below cannot pass on an empty list)", function () {
    assert.ok(durations.length >= 14, durations.join(", "));
  });

  it("a 30-day SBINBOX_SWEEP_INTERVAL_MS is refused: Node would fire that timer after 1 ms", function () {
    const error = errorFor({ SBINBOX_SWEEP_INTERVAL_MS: String(30 * 24 * 3_600_000) });
    assert.equal(error?.setting, "SBINBOX_SWEEP_INTERVAL_MS");
    assert.match(error.message, /at most/);
  });

  for (const name of durations) {
    const limit = name.endsWith("_HOURS") ? MAX_HOURS : MAX_TIMER_MS;
    it(`${name} above ${limit} is a ConfigError naming it`, function () {
      const error = errorFor({ [name]: String(limit + 1) });
      assert.equal(error?.setting, name);
      assert.match(error.message, /must be at most \d+/);
    });
  }

  it("the database timeouts have defaults and are read", function () {
    assert.deepEqual(loadConfig({ env: {} }).databaseTimeouts, {
      connectMs: 15_000,
      statementMs: 30_000,
      idleInTransactionMs: 120_000,
      keepAliveMs: 10_000,
      probeMs: 2_000,
    });
    const config = loadConfig({
      env: {
        SBINBOX_DB_CONNECT_TIMEOUT_MS: "2000",
        SBINBOX_DB_STATEMENT_TIMEOUT_MS: "3000",
        SBINBOX_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: "45000",
        SBINBOX_DB_KEEPALIVE_MS: "4000",
        SBINBOX_DB_PROBE_TIMEOUT_MS: "500",
      },
    });
    assert.deepEqual(config.databaseTimeouts, {
      connectMs: 2000,
      statementMs: 3000,
      idleInTransactionMs: 45000,
      keepAliveMs: 4000,
      probeMs: 500,
    });
    assert.equal(
      errorFor({ SBINBOX_DB_STATEMENT_TIMEOUT_MS: "0" })?.setting,
      "SBINBOX_DB_STATEMENT_TIMEOUT_MS",
    );
  });
});
