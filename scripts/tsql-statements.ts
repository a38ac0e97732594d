// The composed T-SQL of the example's statements handler (src/example/accounts.ts), for `npm run check:tsql`:
// what the worker sends for one message, a batch, a batch past the parameter limit, and a mixed batch's item.
import { accountCreditedStatementsHandler } from "../src/example/accounts.ts";
import { composeStatements, composeTransaction } from "../src/inbox/sqlserver/compose.ts";
import { batchStatements } from "../src/inbox/sqlserver/statements.ts";
import { fakeContext } from "../src/testing/fakes.ts";
import { resolveStatements } from "../src/worker/statements.ts";

export function composedExampleSamples(): { name: string; sql: string }[] {
  const credit = accountCreditedStatementsHandler();
  const message = (i: number) =>
    resolveStatements(
      credit,
      { accountId: `acc-${i}`, amount: i + 1 },
      fakeContext({ messageId: `m-${i}` }),
      "sqlserver",
    );
  const batch = (n: number, maxParameters?: number) => {
    const ids = Array.from({ length: n }, (_, i) => `m-${i}`);
    return composeTransaction(
      { sql: batchStatements.insertMarkers(n), params: ["example", ...ids] },
      ids.map((_, i) => message(i)),
      maxParameters,
    );
  };
  const split = batch(3, 12);
  if (split.whole || split.requests.length < 2)
    throw new Error("tsql-statements: the split sample did not split");
  return [
    ...batch(1).requests.map((r) => ({ name: "composed: one AccountCredited", sql: r.sql })),
    ...batch(3).requests.map((r) => ({ name: "composed: a batch of three", sql: r.sql })),
    ...split.requests.map((r, i) => ({ name: `composed: a split batch, request ${i + 1}`, sql: r.sql })),
    { name: "composed: one message's statements on the handle", sql: composeStatements(message(0)).sql },
    // A statement ending in a line comment: its `;` goes on a line of its own, not into the comment.
    ...composeTransaction({ sql: batchStatements.insertMarkers(2), params: ["example", "m-0", "m-1"] }, [
      [{ sql: "UPDATE dbo.Accounts SET Balance = Balance + @p1 WHERE Id = @p2 -- credit", params: [1, "a"] }],
      message(1),
    ]).requests.map((r) => ({ name: "composed: a statement ending in a -- comment", sql: r.sql })),
  ];
}
