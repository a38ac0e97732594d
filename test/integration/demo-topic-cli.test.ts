import assert from "node:assert/strict";
import { runCli } from "../helpers/cli.ts";

describe("sbinbox demo --topic", function () {
  it("two consuming services on one topic, through forwarding: each applies each event exactly once; RESULT reports each", async function () {
    this.timeout(180_000);
    const result = await runCli(["demo", "--topic", "--count", "100", "--timeout", "150"], {});
    const last = result.stdout.trim().split("\n").at(-1) ?? "";
    assert.equal(
      result.code,
      0,
      `exit code 0; output:\n${result.stdout.slice(-3000)}\n${result.stderr.slice(-3000)}`,
    );
    const fields = Object.fromEntries(
      last
        .replace(/^RESULT /, "")
        .split(" ")
        .map((kv) => kv.split("=") as [string, string]),
    );
    assert.match(last, /^RESULT topic=accounts /);
    assert.equal(fields["distinct"], "100");
    assert.equal(fields["resends"], "5");
    assert.equal(fields["dropped_by_broker"], "5", "resends dropped once, at the topic");
    for (const consumer of ["billing", "ledger"]) {
      assert.equal(fields[`${consumer}.effects`], "100", consumer);
      assert.equal(fields[`${consumer}.lost`], "0", consumer);
      assert.equal(fields[`${consumer}.doubled`], "0", consumer);
      assert.equal(fields[`${consumer}.deadlettered`], "3", consumer);
    }
    assert.ok(
      Number(fields["billing.duplicates_in_inbox"]) >= 1,
      "billing's killed worker's message came back",
    );
    assert.ok(
      Number(fields["ledger.retries_scheduled"]) >= 1,
      "ledger's failOnce event was retried by a copy scheduled on its queue",
    );
    // The foreign subscription (no filter) holds each published message once: 100 events and 3 poison, no copy.
    assert.equal(fields["audit.messages"], "103", "no retry copy reached the foreign subscription");
    assert.equal(fields["billing.retries_scheduled"], "0", "billing retries under the lock, in place");
    assert.match(result.stdout, /killed between commit and complete/);
  });
});
