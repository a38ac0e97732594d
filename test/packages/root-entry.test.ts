/**
 * The root index.js lists the names it re-exports by hand (it picks src/index.ts in this checkout, where handlers/
 * imports "sbinbox" by name, and dist/index.js when installed). A name added to src/index.ts and not to the list
 * would be missing for handlers/ and for every installed project; a name listed but gone would export undefined.
 */
import assert from "node:assert/strict";

describe("sbinbox's entry (index.js)", () => {
  it("re-exports exactly the names src/index.ts exports, the same objects", async () => {
    const source = await import("../../src/index.ts");
    // By package name, as handlers/ imports it: the package's self-reference, through its exports.
    const entry: Record<string, unknown> = await import("sbinbox");
    assert.ok(Object.keys(source).includes("DoNotRetryError"), "the probe must see src/index.ts's exports");
    assert.deepEqual(Object.keys(entry).sort(), Object.keys(source).sort());
    for (const name of Object.keys(source)) {
      assert.equal(entry[name], source[name as keyof typeof source], name);
    }
  });
});
