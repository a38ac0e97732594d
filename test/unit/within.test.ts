import assert from "node:assert/strict";
import { within } from "../../src/domain/within.ts";

describe("within: a promise against a timer", () => {
  it("is true when the promise resolves in time, false when the time runs out first", async () => {
    assert.equal(await within(Promise.resolve("done"), 1_000), true);
    assert.equal(await within(new Promise(() => undefined), 10), false);
  });

  it("passes on a rejection that comes in time", async () => {
    await assert.rejects(within(Promise.reject(new Error("refused")), 1_000), /refused/);
  });
});
