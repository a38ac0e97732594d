/**
 * A team's statements handler under sbinbox-dev/testing: the harness runs it in batches (`batchSize`) on the real
 * worker, broker and PostgreSQL, and `fakeStatements` shows what it gives the worker without a database.
 */
import assert from "node:assert/strict";
import { DoNotRetryError } from "sbinbox";
import { fakeStatements, startHarness, type Harness } from "sbinbox-dev/testing";
import { accountCreditedStatementsHandler, exampleHandlers } from "../../src/example/index.ts";
import { exampleModule } from "../../src/example/module.ts";

describe("harness: a statements handler in batches", function () {
  this.timeout(60_000);
  let harness: Harness;
  before(async () => {
    harness = await startHarness({
      module: exampleModule,
      handlers: exampleHandlers(undefined, "statements"),
      batchSize: 4,
    });
  });
  after(() => harness?.stop());

  it("credits as statements are applied once each, and a resend is a duplicate", async () => {
    const ids = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        harness.publish("AccountCredited", `h-${i}`, { accountId: "h-acct", amount: i + 1 }),
      ),
    );
    const outcomes = await Promise.all(ids.map((id) => harness.outcome(id)));
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ids.map(() => "committed"),
    );
    const { rows } = await harness.db.query<{ balance: string }>(
      "SELECT balance FROM example_accounts WHERE account_id = 'h-acct'",
    );
    assert.deepEqual(rows, [{ balance: "36" }]);
    await harness.sendRaw(
      { messageId: ids[0]!, subject: "AccountCredited", body: { accountId: "h-acct", amount: 1 } },
      { pastDuplicateWindow: true },
    );
    assert.equal((await harness.outcome(ids[0]!)).status, "duplicate");
    const credits = await harness.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM example_credits WHERE account_id = 'h-acct'",
    );
    assert.equal(credits.rows[0]!.n, 8);
  });

  it("fakeStatements: the statements for a body, per dialect, checked as the worker checks them", () => {
    const credit = accountCreditedStatementsHandler();
    const body = { accountId: "a-1", amount: 3 };
    const pg = fakeStatements(credit, body, { context: { messageId: "m-9" } });
    assert.deepEqual(
      pg.map((s) => s.params),
      [
        ["m-9", "a-1", 3],
        ["a-1", 3],
      ],
    );
    assert.match(fakeStatements(credit, body, { dialect: "sqlserver" })[0]!.sql, /dbo\.ExampleCredits/);
    assert.throws(
      () =>
        fakeStatements({ ...credit, statements: () => [{ sql: "COMMIT" }] }, body, { dialect: "sqlserver" }),
      DoNotRetryError,
    );
  });
});
