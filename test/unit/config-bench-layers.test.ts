import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { ConfigError } from "../../src/domain/errors.ts";

// SBINBOX_BENCH_LAYERS_OFF takes safety behaviours away, for the CPU benchmark's ledger: off unless named, and a
// name it does not know is refused rather than ignored (a typo would otherwise measure the layer as free).
describe("config: SBINBOX_BENCH_LAYERS_OFF", function () {
  it("is empty unless set", function () {
    assert.deepEqual(loadConfig({ env: {} }).benchLayersOff, []);
  });

  it("takes progress and settlement-guard, comma-separated, in any case, each once", function () {
    const config = loadConfig({ env: { SBINBOX_BENCH_LAYERS_OFF: " Progress, settlement-guard,progress " } });
    assert.deepEqual(config.benchLayersOff, ["progress", "settlement-guard"]);
  });

  it("refuses a layer it does not know, naming the setting and the layers it takes", function () {
    assert.throws(
      () => loadConfig({ env: { SBINBOX_BENCH_LAYERS_OFF: "progress,spans" } }),
      (error: unknown) =>
        error instanceof ConfigError &&
        /SBINBOX_BENCH_LAYERS_OFF/.test(error.message) &&
        /progress, settlement-guard/.test(error.message),
    );
  });
});
