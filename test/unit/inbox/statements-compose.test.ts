import assert from "node:assert/strict";
import { z } from "zod";
import { DoNotRetryError } from "../../../src/domain/errors.ts";
import type { StatementsHandler } from "../../../src/domain/handler.ts";
import {
  composeStatements,
  composeTransaction,
  MARKER_EXISTS,
  renumberParameters,
  SQLSERVER_MESSAGE_PARAMETERS,
  SQLSERVER_REQUEST_PARAMETERS,
} from "../../../src/inbox/sqlserver/compose.ts";
import { batchStatements } from "../../../src/inbox/sqlserver/statements.ts";
import { resolveStatements } from "../../../src/worker/statements.ts";
import { accountCreditedStatementsHandler } from "../../../src/example/accounts.ts";
import { fakeContext } from "../../../src/testing/fakes.ts";

const markers = (ids: string[]) => ({
  sql: batchStatements.insertMarkers(ids.length),
  params: ["c", ...ids],
});
const insert = (n: number) => ({
  sql: `INSERT INTO dbo.T (${Array.from({ length: n }, (_, i) => `C${i + 1}`).join(", ")}) VALUES (${Array.from({ length: n }, (_, i) => `@p${i + 1}`).join(", ")})`,
  params: Array.from({ length: n }, (_, i) => i + 1),
});

describe("statements on SQL Server: renumbering and composition", () => {
  it("renumbers @pN references, repeated ones alike, and leaves @@ROWCOUNT, variables, strings, names and comments alone", () => {
    const sql =
      "UPDATE [x@p1] SET a = @p2, b = N'@p1 isn''t' /* @p1 /* nested @p2 */ @p1 */ WHERE c = @p1 -- @p2\n" +
      'IF @@ROWCOUNT = 0 INSERT INTO "q@p1" (a) VALUES (@P1); SET @pa = @p10';
    const { sql: out, highest } = renumberParameters(sql, 5);
    assert.equal(
      out,
      "UPDATE [x@p1] SET a = @p7, b = N'@p1 isn''t' /* @p1 /* nested @p2 */ @p1 */ WHERE c = @p6 -- @p2\n" +
        'IF @@ROWCOUNT = 0 INSERT INTO "q@p1" (a) VALUES (@p6); SET @pa = @p15',
    );
    assert.equal(highest, 10);
  });

  it("composes one request that opens and commits: markers guarded, statements numbered after them", () => {
    const composed = composeTransaction(markers(["a", "b"]), [
      [{ sql: "INSERT INTO dbo.E (M) VALUES (@p1);", params: ["a"] }],
      [{ sql: "INSERT INTO dbo.E (M, N) VALUES (@p1, @p2)", params: ["b", 2] }],
    ]);
    assert.equal(composed.whole, true);
    assert.equal(composed.requests.length, 1);
    const [request] = composed.requests;
    assert.deepEqual(request!.params, ["c", "a", "b", "a", "b", 2]);
    assert.match(
      request!.sql,
      /^SET XACT_ABORT ON;\nBEGIN TRANSACTION;\nBEGIN TRY\nINSERT INTO \[dbo\]\.Inbox/,
    );
    assert.match(
      request!.sql,
      new RegExp(`THROW ${MARKER_EXISTS.number}, N'[^']+', ${MARKER_EXISTS.state};`),
    );
    // The statements inside TRY: an error XACT_ABORT leaves running (RAISERROR) rolls back and ends the batch.
    assert.match(
      request!.sql,
      /END CATCH;\nBEGIN TRY\nINSERT INTO dbo\.E \(M\) VALUES \(@p4\);\nINSERT INTO dbo\.E \(M, N\) VALUES \(@p5, @p6\);\nEND TRY\nBEGIN CATCH\nIF XACT_STATE\(\) <> 0 ROLLBACK TRANSACTION;\nTHROW;\nEND CATCH;\nCOMMIT TRANSACTION;$/,
    );
  });

  it("a statement ending in a -- comment gets its ; on a line of its own", () => {
    const composed = composeStatements([
      { sql: "UPDATE dbo.T SET x = x + @p1 WHERE id = 1 -- one more", params: [1] },
      { sql: "UPDATE dbo.T SET x = x + @p1 -- again;\n", params: [2] },
      { sql: "UPDATE dbo.T SET x = 0 /* -- not a line comment */", params: [] },
    ]);
    assert.equal(
      composed.sql,
      "UPDATE dbo.T SET x = x + @p1 WHERE id = 1 -- one more\n;\n" +
        "UPDATE dbo.T SET x = x + @p2 -- again\n;\n" +
        "UPDATE dbo.T SET x = 0 /* -- not a line comment */;",
    );
  });

  it("refuses @p0 and numbers with leading zeros: renumbered, they would bind the marker's parameters", () => {
    for (const sql of ["UPDATE dbo.A SET B = @p1 WHERE Id = @p0", "SELECT @p01", "SELECT @P00"])
      assert.throws(() => renumberParameters(sql, 2), /parameters are numbered from @p1/, sql);
    assert.equal(renumberParameters("SELECT '@p0', [@p0] -- @p0", 2).highest, 0);
    assert.equal(renumberParameters("SELECT @p10, @p100", 0).highest, 100);
  });

  it("splits at the parameter limit between messages, never inside one, without transaction control", () => {
    // Markers of 3 (4 parameters), then messages of 1,000, 1,000 and 500: 2,004 + 500 > 2,098.
    const composed = composeTransaction(markers(["a", "b", "c"]), [
      [insert(1000)],
      [insert(1000)],
      [insert(500)],
    ]);
    assert.equal(composed.whole, false);
    assert.deepEqual(
      composed.requests.map((r) => r.params.length),
      [2004, 500],
    );
    for (const r of composed.requests) {
      assert.ok(r.params.length <= SQLSERVER_REQUEST_PARAMETERS);
      assert.doesNotMatch(r.sql, /BEGIN TRANSACTION|COMMIT/);
      // Every request numbers its own parameters from 1.
      assert.equal(renumberParameters(r.sql, 0).highest, r.params.length);
    }
    assert.match(composed.requests[0]!.sql, /^SET XACT_ABORT ON;\nBEGIN TRY/);
    // Each request's statements inside a TRY of their own, after the markers' in the first.
    for (const r of composed.requests)
      assert.match(
        r.sql,
        /BEGIN TRY\n(?:INSERT INTO dbo\.T [^\n]+\n)+END TRY\nBEGIN CATCH\nIF XACT_STATE\(\) <> 0 ROLLBACK TRANSACTION;\nTHROW;\nEND CATCH;$/,
      );
    assert.equal(composed.requests[0]!.sql.split("BEGIN TRY").length - 1, 2);
  });

  it("fills a request to exactly the limit", () => {
    const composed = composeTransaction(markers(["a"]), [[insert(SQLSERVER_MESSAGE_PARAMETERS)]]);
    assert.equal(composed.whole, true);
    assert.equal(composed.requests[0]!.params.length, SQLSERVER_REQUEST_PARAMETERS);
  });

  it("refuses a message that cannot fit in a request beside its marker, and a reference past the parameters", () => {
    assert.throws(
      () => composeTransaction(markers(["a"]), [[insert(SQLSERVER_MESSAGE_PARAMETERS + 1)]]),
      /take 2097 parameters; one request takes at most 2098/,
    );
    assert.throws(
      () => composeStatements([{ sql: "SELECT @p1, @p3", params: [1, 2] }]),
      /refers to @p3 but is given 2 parameters/,
    );
  });
});

describe("statements handlers: what statements() returns, checked before anything is sent", () => {
  const handler = (statements: () => unknown): StatementsHandler<unknown> => ({
    kind: "statements",
    type: "Thing",
    schema: z.unknown(),
    statements: statements as StatementsHandler<unknown>["statements"],
  });
  const resolve = (statements: () => unknown, dialect: "postgres" | "sqlserver" = "sqlserver") =>
    resolveStatements(handler(statements), {}, fakeContext(), dialect);

  it("resolves the example's statements per dialect", () => {
    const credit = accountCreditedStatementsHandler();
    const body = { accountId: "acc-1", amount: 5 };
    const ctx = fakeContext({ messageId: "m-1" });
    const pg = resolveStatements(credit, body, ctx, "postgres");
    assert.deepEqual(
      pg.map((s) => s.params),
      [
        ["m-1", "acc-1", 5],
        ["acc-1", 5],
      ],
    );
    assert.match(pg[0]!.sql, /\$1/);
    assert.match(resolveStatements(credit, body, ctx, "sqlserver")[1]!.sql, /@@ROWCOUNT/);
  });

  const refused: [string, () => unknown, RegExp][] = [
    ["no array", () => ({ sql: "x" }), /returned no array/],
    [
      "no text for the dialect",
      () => [{ sql: { postgres: "SELECT 1" } }],
      /statement 1 has no SQL text for sqlserver/,
    ],
    [
      "params not an array",
      () => [{ sql: "SELECT @p1", params: 1 }],
      /statement 1's params are not an array/,
    ],
    ["transaction control", () => [{ sql: "SELECT 1" }, { sql: "COMMIT" }], /statement 2: /],
    [
      "a reference past its parameters",
      () => [{ sql: "SELECT @p2", params: [1] }],
      /refers to @p2 but gives 1/,
    ],
    [
      "@p0 (it would bind the marker's MessageId)",
      () => [{ sql: "UPDATE dbo.A SET B = B + @p1 WHERE Id = @p0", params: [5] }],
      /statement 1: @p0: parameters are numbered from @p1/,
    ],
    ["a leading zero", () => [{ sql: "SELECT @p01", params: [5] }], /@p01: parameters are numbered from @p1/],
    [
      "a savepoint (SQL Server)",
      () => [{ sql: "SAVE TRANSACTION s1" }],
      /statement 1: SAVE TRANSACTION \(the statements are sent together/,
    ],
    [
      "a DECLARE (made again by the next message's statements of a batch)",
      () => [{ sql: "DECLARE @n int = @p1; UPDATE dbo.T SET x = x + @n WHERE id = 1", params: [1] }],
      /statement 1: DECLARE \(/,
    ],
    [
      "more parameters than a request takes",
      () =>
        Array.from({ length: 3 }, () => ({ sql: "SELECT 1", params: Array.from({ length: 700 }, () => 1) })),
      /take 2100 parameters, more than the 2096/,
    ],
  ];
  for (const [what, statements, reason] of refused) {
    it(`refuses ${what} as NotRetryable, naming the handler`, () => {
      assert.throws(
        () => resolve(statements),
        (error: unknown) =>
          error instanceof DoNotRetryError && reason.test(error.message) && /"Thing"/.test(error.message),
      );
    });
  }

  it("lets what statements() throws through as the handler's own failure", () => {
    const thrown = new Error("downstream said no");
    assert.throws(
      () =>
        resolve(() => {
          throw thrown;
        }),
      (error: unknown) => error === thrown,
    );
  });

  it("refuses a savepoint among the statements on PostgreSQL too", () => {
    for (const sql of ["SAVEPOINT s", "ROLLBACK TO SAVEPOINT s", "RELEASE SAVEPOINT s"])
      assert.throws(
        () => resolve(() => [{ sql: "SELECT 1" }, { sql }], "postgres"),
        (error: unknown) => error instanceof DoNotRetryError && /statement 2: /.test(error.message),
        sql,
      );
  });

  it("has no parameter ceiling of its own on PostgreSQL", () => {
    // Each of the 700 parameters has its placeholder, as PostgreSQL requires.
    const sql = `SELECT ${Array.from({ length: 700 }, (_, i) => `$${i + 1}::int`).join(" + ")}`;
    const many = Array.from({ length: 3 }, () => ({ sql, params: Array.from({ length: 700 }, () => 1) }));
    assert.equal(resolve(() => many, "postgres").length, 3);
  });

  it("on PostgreSQL, parameters that disagree with $1..$n are refused before anything is sent, naming the statement", () => {
    for (const [sql, count, why] of [
      ["SELECT 1 WHERE $1::text IS NOT NULL", 2, "never refers to $2"],
      ["SELECT $2::text", 2, "never refers to $1"],
      ["SELECT $3::text", 2, "refers to $3 but is given 2 parameters"],
    ] as const) {
      assert.throws(
        () => resolve(() => [{ sql, params: Array.from({ length: count }, () => "x") }], "postgres"),
        (error: Error) =>
          error.name === "DoNotRetryError" && error.message.includes(sql) && error.message.includes(why),
        sql,
      );
    }
  });
});
