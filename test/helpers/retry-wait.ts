import type { RetryPolicy } from "../../src/worker/retry-policy.ts";

/**
 * What a message needs beyond its retry delays to be settled: the worker's start, each attempt's receive, work and
 * transaction, and the settlement, on a machine shared with other runs. The delays themselves come from the policy.
 */
export const SETTLE_SLACK_MS = 10_000;

/**
 * How many in-place retries it takes before an attempt starts at least `failingMs` after the first one, with every
 * delay at the bottom of its jitter: a downstream down for `failingMs` is surely up again by that attempt.
 */
export function retriesToOutlast(policy: RetryPolicy, failingMs: number): number {
  let earliest = 0;
  for (const [index, delay] of policy.transientDelaysMs.entries()) {
    if (delay > policy.maxInProcessWaitMs) break;
    earliest += delay * (1 - policy.jitter);
    if (earliest >= failingMs) return index + 1;
  }
  throw new Error(`a failure of ${failingMs} ms outlasts the in-place retries of this policy`);
}

/**
 * The longest the first `retries` in-place retries of a transient failure can wait in all: each delay at the top of
 * its jitter, capped at the policy's in-place limit as the worker caps it (src/worker/retry-policy.ts).
 */
export function longestInPlaceWaitMs(policy: RetryPolicy, retries: number): number {
  const delays = policy.transientDelaysMs.slice(0, retries);
  if (delays.length < retries) throw new Error(`the policy has ${delays.length} retries, not ${retries}`);
  return delays.reduce(
    (sum, delay) => sum + Math.min(delay * (1 + policy.jitter), policy.maxInProcessWaitMs),
    0,
  );
}

/** The time a message failing `retries` times in place may take to be settled: its delays plus the slack. */
export function settleDeadlineMs(policy: RetryPolicy, retries: number): number {
  return longestInPlaceWaitMs(policy, retries) + SETTLE_SLACK_MS;
}
