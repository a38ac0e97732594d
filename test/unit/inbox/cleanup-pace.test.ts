import assert from "node:assert/strict";
import { ArrivalMeter, CATCH_UP_MS, checkPace, PassPacer } from "../../../src/inbox/cleanup-pace.ts";
import { loadConfig } from "../../../src/config/index.ts";
import { ConfigError } from "../../../src/domain/errors.ts";

/** The pace's arithmetic on a clock the test moves: the rate it reads and the waits it sets. */
describe("cleanup pace: deletes at a multiple of the insert rate, batches spaced evenly", function () {
  it("reads the insert rate from the key's advance, unknown for the first second, over a sliding window", function () {
    const meter = new ArrivalMeter(30_000, 1_000);
    meter.observe(1000n, 0);
    meter.observe(1500n, 500);
    assert.equal(meter.perSecond(), undefined, "half a second of Ids is not a rate");
    meter.observe(2000n, 1000);
    assert.equal(meter.perSecond(), 1000);
    // 40 s on at 250 a second: the window forgets the first 1,000 a second.
    for (let t = 2000; t <= 41_000; t += 1000) meter.observe(2000n + BigInt(((t - 1000) / 1000) * 250), t);
    assert.equal(meter.perSecond(), 250);
    // The newest rows deleted (a swept claim was the highest Id): the key did not go back, the rate stands.
    meter.observe(11_740n, 41_500);
    assert.equal(meter.perSecond(), 250);
    // A table emptied and its identity started again: the rate is unknown until a second is seen anew.
    meter.observe(5n, 42_000);
    assert.equal(meter.perSecond(), undefined);
  });

  it("spaces batches so that deletes come at multiple x the insert rate, and at minPerSecond while it is unknown", function () {
    const meter = new ArrivalMeter();
    const pacer = new PassPacer({ multiple: 4, minPerSecond: 1000 }, meter, 0);
    // No rate yet: 500 deleted at 1,000 a second earn a slot of 500 ms; the batch took 5 of them.
    assert.deepEqual(pacer.afterBatch(500, 5), {
      insertPerSecond: undefined,
      targetPerSecond: 1000,
      waitMs: 495,
    });
    meter.observe(0n, 0);
    meter.observe(1000n, 1000);
    // 1,000 inserts a second: 4,000 deletes a second, 500 rows a 125 ms slot, counted from where the last ended.
    const step = pacer.afterBatch(500, 505);
    assert.equal(step.targetPerSecond, 4000);
    assert.equal(step.waitMs, 120);
  });

  it("a batch slower than its slot leaves no wait; a stall is made up by at most CATCH_UP_MS of slots, not in a burst", function () {
    const meter = new ArrivalMeter();
    meter.observe(0n, -2000);
    meter.observe(2000n, 0);
    const pacer = new PassPacer({ multiple: 4, minPerSecond: 1 }, meter, 0);
    // Slot 500 / 4,000 = 125 ms; the batch took 400 ms: the server is the limit, go on at once.
    assert.equal(pacer.afterBatch(500, 400).waitMs, 0);
    // A 10 s stall: the batch after it, then 1 s of it made up (8 slots back to back), not 10 s (80 slots).
    let backToBack = 0;
    for (let at = 10_400; pacer.afterBatch(500, at).waitMs === 0; at += 1) backToBack += 1;
    assert.equal(backToBack, 1 + CATCH_UP_MS / 125);
  });

  it("refuses a pace given in code that could not end, naming the field", function () {
    assert.throws(
      () => checkPace({ multiple: 0.5, minPerSecond: 1000 }),
      /pace\.multiple must be .* at least 1/,
    );
    assert.throws(
      () => checkPace({ multiple: 4, minPerSecond: 0 }),
      /pace\.minPerSecond must be .* at least 1/,
    );
  });
});

describe("config: the retention pass's pace", function () {
  const error = (env: Record<string, string>): ConfigError => {
    try {
      loadConfig({ env });
    } catch (e) {
      if (e instanceof ConfigError) return e;
      throw e;
    }
    return assert.fail("expected a ConfigError");
  };

  it("paces by default (4 x the insert rate, at least 1,000 a second, batches of 500); no fixed pause", function () {
    const config = loadConfig({ env: {} });
    assert.deepEqual(config.cleanupPace, { multiple: 4, minPerSecond: 1000 });
    assert.equal(config.cleanupBatchRows, 500);
    assert.equal(config.cleanupPauseMs, undefined);
    assert.equal(loadConfig({ env: { SBINBOX_CLEANUP_PAUSE_MS: "250" } }).cleanupPauseMs, 250);
  });

  it("a fixed pause alone gives the batches of 2,000 it had before the pace; a batch size given with it wins", function () {
    const paused = loadConfig({ env: { SBINBOX_CLEANUP_PAUSE_MS: "250" } });
    assert.equal(paused.cleanupPauseMs, 250);
    assert.equal(paused.cleanupBatchRows, 2000);
    const both = loadConfig({ env: { SBINBOX_CLEANUP_PAUSE_MS: "250", SBINBOX_CLEANUP_BATCH_ROWS: "500" } });
    assert.equal(both.cleanupBatchRows, 500);
  });

  it("refuses a fixed pause beside the pace's settings, and batches past lock escalation, naming the setting", function () {
    const both = error({ SBINBOX_CLEANUP_PAUSE_MS: "250", SBINBOX_CLEANUP_RATE_MULTIPLE: "6" });
    assert.equal(both.setting, "SBINBOX_CLEANUP_PAUSE_MS");
    assert.match(both.message, /SBINBOX_CLEANUP_RATE_MULTIPLE would be ignored/);
    const rows = error({ SBINBOX_CLEANUP_BATCH_ROWS: "5000" });
    assert.equal(rows.setting, "SBINBOX_CLEANUP_BATCH_ROWS");
    assert.match(rows.message, /at most 4000/);
    assert.equal(error({ SBINBOX_CLEANUP_RATE_MULTIPLE: "0" }).setting, "SBINBOX_CLEANUP_RATE_MULTIPLE");
    assert.equal(error({ SBINBOX_CLEANUP_MIN_RATE: "fast" }).setting, "SBINBOX_CLEANUP_MIN_RATE");
  });
});
