import assert from "node:assert/strict";
import fc from "fast-check";
import { loadConfig } from "../../src/config/load.ts";
import { ConfigError } from "../../src/domain/errors.ts";

const BASE = {
  SBINBOX_SERVICEBUS_CONNECTION_STRING:
    "Endpoint=sb://localhost:5672;SharedAccessKeyName=k;SharedAccessKey=v",
  SBINBOX_POSTGRES_URL: "postgres://u:p@127.0.0.1:5432/db",
};

/** Whole-number settings and their documented bounds. */
const WHOLE: Record<string, { min: number; max?: number }> = {
  SBINBOX_MAX_CONCURRENT_CALLS: { min: 1, max: 1000 },
  SBINBOX_MAX_AUTO_LOCK_RENEWAL_MS: { min: 0 },
  SBINBOX_MAX_MESSAGE_BYTES: { min: 1 },
  SBINBOX_GRACE_PERIOD_MS: { min: 0 },
  SBINBOX_CLEANUP_INTERVAL_MS: { min: 0 },
  SBINBOX_CLEANUP_PAUSE_MS: { min: 0, max: 10_000 },
  SBINBOX_CLEANUP_RATE_MULTIPLE: { min: 1, max: 1000 },
  SBINBOX_CLEANUP_MIN_RATE: { min: 1, max: 10_000_000 },
  SBINBOX_CLEANUP_BATCH_ROWS: { min: 1, max: 4000 },
  SBINBOX_CLAIM_TIMEOUT_MS: { min: 1 },
  SBINBOX_SWEEP_INTERVAL_MS: { min: 0 },
  PORT: { min: 0, max: 65535 },
};
const BOOLEAN_WORDS = ["true", "false", "1", "0", "yes", "no", "on", "off"];

function refusal(env: Record<string, string>): ConfigError | undefined {
  try {
    loadConfig({ env: { ...BASE, ...env }, readFile: () => "{}" });
    return undefined;
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
}

describe("config: bad values are refused with an error naming the setting (property)", function () {
  it("a whole-number setting refuses anything that is not a whole number in range", function () {
    const notWhole = fc.oneof(
      fc.string({ minLength: 1, maxLength: 12 }).filter((s) => !/^\s*\d+\s*$/.test(s) && s.trim() !== ""),
      fc
        .double({ noNaN: true })
        .filter((d) => !Number.isInteger(d))
        .map(String),
      fc.integer({ max: -1 }).map(String),
    );
    fc.assert(
      fc.property(fc.constantFrom(...Object.keys(WHOLE)), notWhole, (setting, value) => {
        const error = refusal({ [setting]: value });
        assert.ok(error, `${setting}=${JSON.stringify(value)} was accepted`);
        assert.equal(error.setting, setting);
        assert.ok(error.message.startsWith(`${setting}: `), error.message);
      }),
      { numRuns: 300 },
    );
  });

  it("a whole number outside the bounds is refused, one inside is taken as given", function () {
    fc.assert(
      fc.property(
        fc.constantFrom(...Object.keys(WHOLE)),
        fc.integer({ min: 0, max: 2_000_000 }),
        (setting, n) => {
          const { min, max = Number.MAX_SAFE_INTEGER } = WHOLE[setting]!;
          const error = refusal({ [setting]: String(n) });
          if (n < min || n > max) {
            assert.equal(error?.setting, setting, `${setting}=${n} must be refused`);
            assert.match(error.message, n < min ? /at least/ : /at most/);
          } else {
            assert.equal(error, undefined, `${setting}=${n} must be accepted: ${error?.message}`);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it("the pre-check switch refuses any word but redeliveries/true/false/1/0/yes/no/on/off", function () {
    fc.assert(
      fc.property(
        fc
          .string({ minLength: 1, maxLength: 10 })
          .filter(
            (s) => s.trim() !== "" && ![...BOOLEAN_WORDS, "redeliveries"].includes(s.trim().toLowerCase()),
          ),
        (value) => {
          const error = refusal({ SBINBOX_PRECHECK: value });
          assert.equal(error?.setting, "SBINBOX_PRECHECK", JSON.stringify(value));
          assert.match(error.message, /redeliveries, true or false/);
        },
      ),
      { numRuns: 200 },
    );
  });

  it("connection settings of the wrong shape are refused by name", function () {
    fc.assert(
      fc.property(
        fc.constantFrom(
          "SBINBOX_SERVICEBUS_CONNECTION_STRING",
          "SBINBOX_POSTGRES_URL",
          "SBINBOX_LOG_LEVEL",
          "SBINBOX_DATABASE",
        ),
        fc
          .string({ minLength: 1, maxLength: 30 })
          .filter(
            (s) =>
              s.trim() !== "" &&
              !/Endpoint\s*=\s*sb:\/\//i.test(s) &&
              !/^postgres(ql)?:\/\//.test(s.trim()) &&
              !["debug", "info", "warn", "error", "postgres", "sqlserver"].includes(s.trim()),
          ),
        (setting, value) => {
          const error = refusal({ [setting]: value });
          assert.equal(error?.setting, setting, `${setting}=${JSON.stringify(value)}`);
        },
      ),
      { numRuns: 200 },
    );
  });
});
