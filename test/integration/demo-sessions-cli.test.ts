import assert from "node:assert/strict";
import { appliedOrder, outOfOrder } from "../../src/app/demo-checks.ts";
import { runCli } from "../helpers/cli.ts";
import { exampleDatabase } from "../helpers/worker.ts";

describe("sbinbox demo --sessions", function () {
  it("per-account sequences on a session queue: each applied exactly once and in its account's order", async function () {
    this.timeout(120_000);
    const result = await runCli(["demo", "--sessions", "--count", "300", "--timeout", "90"], {});
    const last = result.stdout.trim().split("\n").at(-1) ?? "";
    assert.equal(
      result.code,
      0,
      `exit code 0; output:\n${result.stdout.slice(-3000)}\n${result.stderr.slice(-3000)}`,
    );
    assert.match(
      last,
      /^RESULT sessions=\d+ distinct=\d+ effects=\d+ resends=\d+ dropped_by_broker=\d+ duplicates_in_inbox=\d+ retries_waited=\d+ poison=\d+ deadlettered=\d+ lost=\d+ doubled=\d+ out_of_order=\d+$/,
    );
    const fields = Object.fromEntries(
      last
        .replace(/^RESULT /, "")
        .split(" ")
        .map((kv) => kv.split("=") as [string, string]),
    );
    assert.equal(fields["sessions"], "20");
    assert.equal(fields["distinct"], "300");
    assert.equal(fields["effects"], "300");
    assert.equal(fields["resends"], "15");
    assert.equal(fields["dropped_by_broker"], "15");
    assert.equal(fields["poison"], "3");
    assert.equal(fields["deadlettered"], "3", "poison in a session is dead-lettered; the session goes on");
    assert.equal(fields["lost"], "0");
    assert.equal(fields["doubled"], "0");
    assert.equal(fields["out_of_order"], "0");
    assert.ok(Number(fields["duplicates_in_inbox"]) >= 1, "the killed worker's committed message came back");
    assert.match(result.stdout, /killed between commit and complete/);
    assert.match(result.stdout, /queue sbinbox-sessions requires sessions/);
  });

  it("counts, from the database, a credit applied after a later one of its account", async function () {
    const db = await exampleDatabase("demo_sessions_order");
    try {
      // Applied (identity order): a1 #1, b #1, a1 #3, a1 #2 (late), b #2, b #2 again (doubled), a stray row.
      const rows: [string, string][] = [
        ["a-1", "acc-a"],
        ["b-1", "acc-b"],
        ["a-3", "acc-a"],
        ["a-2", "acc-a"],
        ["b-2", "acc-b"],
        ["b-2", "acc-b"],
        ["stray", "acc-a"],
      ];
      for (const [messageId, account] of rows)
        await db.sql.query(
          "INSERT INTO example_credits (message_id, account_id, amount) VALUES ($1, $2, 1)",
          [messageId, account],
        );
      const sequenceOf = new Map([
        ["a-1", 1],
        ["a-2", 2],
        ["a-3", 3],
        ["b-1", 1],
        ["b-2", 2],
      ]);
      const applied = await appliedOrder(db.sql);
      assert.deepEqual(
        applied.map((r) => r.messageId),
        rows.map(([id]) => id),
        "read back in the order applied",
      );
      assert.equal(outOfOrder(applied, sequenceOf), 2, "a-2 after a-3, and b-2 twice");
      assert.equal(outOfOrder(applied.slice(0, 3), sequenceOf), 0, "a gap alone is not out of order");
    } finally {
      await db.close();
    }
  });
});
