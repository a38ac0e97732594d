import assert from "node:assert/strict";
import { median } from "../../bench/median.ts";

describe("bench: median", function () {
  it("of an even count is the mean of the two middle values, not the upper one", function () {
    assert.equal(median([100, 300]), 200);
    assert.equal(median([4, 1, 3, 2]), 2.5);
  });

  it("of an odd count is the middle value", function () {
    assert.equal(median([5, 1, 3]), 3);
    assert.equal(median([7]), 7);
  });

  it("of nothing is an error", function () {
    assert.throws(() => median([]), RangeError);
  });
});
