import assert from "node:assert/strict";
import { runCli } from "../helpers/cli.ts";

describe("sbinbox demo", function () {
  it("runs the whole system on embedded defaults and reports exactly once, as its last line", async function () {
    this.timeout(120_000);
    const result = await runCli(["demo", "--count", "300", "--timeout", "90"], {});
    const lines = result.stdout.trim().split("\n");
    const last = lines.at(-1) ?? "";
    assert.equal(
      result.code,
      0,
      `exit code 0; output:\n${result.stdout.slice(-3000)}\n${result.stderr.slice(-3000)}`,
    );
    const match =
      /^RESULT distinct=(\d+) effects=(\d+) resends=(\d+) dropped_by_broker=(\d+) duplicates_in_inbox=(\d+) retries=(\d+) poison=(\d+) deadlettered=(\d+) lost=(\d+) doubled=(\d+) upstream=(\d+) upstream_effects=(\d+) upstream_rolled_back=(\d+) rolled_back_effects=(\d+) upstream_dropped_by_broker=(\d+)$/.exec(
        last,
      );
    assert.ok(match, `last line is the RESULT line: ${last}`);
    const [
      distinct,
      effects,
      resends,
      dropped,
      duplicates,
      retries,
      poison,
      deadlettered,
      lost,
      doubled,
      upstream,
      upstreamEffects,
      rolledBack,
      rolledBackEffects,
      upstreamDropped,
    ] = match.slice(1).map(Number);
    assert.equal(distinct, 300);
    assert.equal(effects, 300);
    assert.equal(resends, 15);
    assert.equal(dropped, resends);
    assert.ok(duplicates! >= 1, "the killed worker's committed message came back as a duplicate");
    assert.ok(retries! >= 1, "the event that fails once was retried (in place, a second later)");
    assert.match(result.stdout, new RegExp(`transient failures +${retries} retried \\(\\d+ in place`));
    assert.equal(deadlettered, poison);
    assert.equal(lost, 0);
    assert.equal(doubled, 0);
    assert.match(result.stdout, /killed between commit and complete/);
    // The upstream half: 75 transactions (300 / 4), every 10th rolled back; one effect each, none for rollbacks.
    assert.equal(upstream, 68);
    assert.equal(rolledBack, 7);
    assert.equal(upstreamEffects, upstream);
    assert.equal(rolledBackEffects, 0);
    // The replacement relay's copies of rows its killed predecessor had sent are counted apart from the resends:
    // together they are every drop on the queue.
    const relayLine =
      /relay copies dropped +(\d+) \(resent by the replacement relay; (\d+) dropped on the queue in all\)/.exec(
        result.stdout,
      );
    assert.ok(relayLine, "the report's relay line");
    assert.equal(Number(relayLine[1]), upstreamDropped);
    assert.equal(Number(relayLine[2]), dropped + upstreamDropped!);
    assert.match(result.stdout, /the relay was killed once and replaced/);
  });
});
