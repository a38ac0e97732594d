/**
 * packages/dev/index.js lists the names it re-exports by hand (`export *` cannot be conditional, and it picks
 * src/dev.ts in this checkout or dist/dev.js when installed). A name added to src/dev.ts and not to the list would
 * be missing from the installed sbinbox-dev only; a name listed but gone would export undefined. Both show here.
 */
import assert from "node:assert/strict";

describe("sbinbox-dev's entry (packages/dev/index.js)", () => {
  it("re-exports exactly the names src/dev.ts exports", async () => {
    const source = await import("../../src/dev.ts");
    // By package name, as the worker loads it: the workspace link, whose real path is packages/dev/index.js.
    const entry: Record<string, unknown> = await import("sbinbox-dev");
    assert.ok(Object.keys(source).includes("LocalBroker"), "the probe must see src/dev.ts's exports");
    assert.deepEqual(Object.keys(entry).sort(), Object.keys(source).sort());
    for (const name of Object.keys(source)) {
      assert.equal(entry[name], source[name as keyof typeof source], name);
    }
  });
});

describe("sbinbox-dev/testing's entry (packages/dev/testing.js)", () => {
  it("re-exports exactly the names src/testing/index.ts exports", async () => {
    const source = await import("../../src/testing/index.ts");
    const entry: Record<string, unknown> = await import("sbinbox-dev/testing");
    assert.ok(
      Object.keys(source).includes("startHarness"),
      "the probe must see src/testing/index.ts's exports",
    );
    assert.deepEqual(Object.keys(entry).sort(), Object.keys(source).sort());
    for (const name of Object.keys(source)) {
      assert.equal(entry[name], source[name as keyof typeof source], name);
    }
  });
});
