import assert from "node:assert/strict";
import fc from "fast-check";
import { SettlementScheduler } from "../../src/servicebus/settlement.ts";
import type { Disposition } from "../../src/telemetry/names.ts";

/**
 * Records which settlements were issued in the same synchronous run (one rhea flush); the rule is that a flush
 * holds only completes, or exactly one other settlement.
 */
function recordFlushes(): { flushes: Disposition[][]; issue: (d: Disposition) => () => Promise<void> } {
  const flushes: Disposition[][] = [];
  let current: Disposition[] | undefined;
  return {
    flushes,
    issue: (d) => () => {
      if (!current) {
        current = [];
        flushes.push(current);
        process.nextTick(() => (current = undefined)); // rhea writes its dispositions on the next tick
      }
      current.push(d);
      return Promise.resolve();
    },
  };
}

describe("settlement scheduler", function () {
  it("never mixes a complete with another settlement in one flush", async function () {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom<Disposition>("complete", "abandon", "dead_letter"), { maxLength: 30 }),
        async (ds) => {
          const scheduler = new SettlementScheduler();
          const { flushes, issue } = recordFlushes();
          await Promise.all(ds.map((d) => scheduler.settle(d, issue(d))));
          for (const flush of flushes) {
            const ok = flush.every((d) => d === "complete") || flush.length === 1;
            assert.ok(ok, `a flush mixed settlements: ${flush.join(",")}`);
          }
          assert.equal(flushes.flat().length, ds.length, "every settlement issued once");
        },
      ),
      { numRuns: 50 },
    );
  });

  it("batches completes that arrive together", async function () {
    const scheduler = new SettlementScheduler();
    const { flushes, issue } = recordFlushes();
    await Promise.all(Array.from({ length: 10 }, () => scheduler.settle("complete", issue("complete"))));
    assert.equal(flushes.length, 1);
  });

  it("passes a settlement's failure to its caller only", async function () {
    const scheduler = new SettlementScheduler();
    const lost = Object.assign(new Error("lock lost"), { code: "MessageLockLost" });
    const results = await Promise.allSettled([
      scheduler.settle("complete", () => Promise.reject(lost)),
      scheduler.settle("complete", () => Promise.resolve()),
      scheduler.settle("abandon", () => {
        throw new Error("sync throw");
      }),
    ]);
    assert.deepEqual(
      results.map((r) => r.status),
      ["rejected", "fulfilled", "rejected"],
    );
    assert.equal((results[0] as PromiseRejectedResult).reason, lost);
  });
});
