import assert from "node:assert/strict";
import { disposingAfter, gateKeeper } from "../conformance/guards.ts";

// The conformance suites' own guards, which run only where a database is given: checked here without one.
describe("conformance guards", function () {
  it("openAll opens the gates a failed test left closed, and only those", async function () {
    const { gate, openAll } = gateKeeper();
    const opened = gate();
    const left = gate();
    opened.open();
    let released = false;
    const holder = left.promise.then(() => (released = true));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(released, false, "a closed gate resolved by itself");
    openAll();
    await holder;
    assert.equal(released, true);
  });

  it("a clean-up that fails after a failed body keeps the body's error and adds its own", async function () {
    const failing = { dispose: () => Promise.reject(new Error("drop failed")) };
    await assert.rejects(
      disposingAfter(failing, () => Promise.reject(new assert.AssertionError({ message: "the real one" }))),
      (error: unknown) =>
        error instanceof assert.AssertionError &&
        /the real one/.test(error.message) &&
        /clean-up failed too: Error: drop failed/.test(error.message),
    );
    await assert.rejects(
      disposingAfter(failing, () => Promise.resolve(1)),
      /drop failed/,
    );
    let disposed = 0;
    const fine = { dispose: () => Promise.resolve(void (disposed += 1)) };
    assert.equal(await disposingAfter(fine, () => Promise.resolve(7)), 7);
    assert.equal(disposed, 1);
  });
});
