import assert from "node:assert/strict";
import { z } from "zod";
import { DoNotRetryError, placeholderMismatch, type StatementsHandler } from "sbinbox";
import { fakeStatements, fakeTransaction } from "sbinbox-dev/testing";

describe("placeholders against parameters", () => {
  it("PostgreSQL: $1..$n must be exactly the parameters given, outside strings, quoted names and comments", () => {
    assert.equal(placeholderMismatch("SELECT $1::text, $2::int", "postgres", 2), undefined);
    assert.equal(placeholderMismatch("SELECT $1, $1", "postgres", 1), undefined, "a parameter used twice");
    assert.equal(
      placeholderMismatch("SELECT 1 WHERE $1::text IS NOT NULL", "postgres", 2),
      "it is given 2 parameters but never refers to $2",
    );
    assert.equal(
      placeholderMismatch("SELECT $2::text", "postgres", 2),
      "it is given 2 parameters but never refers to $1",
    );
    assert.equal(
      placeholderMismatch("SELECT $3", "postgres", 2),
      "it refers to $3 but is given 2 parameters",
    );
    assert.equal(
      placeholderMismatch("SELECT $1", "postgres", 0),
      "it refers to $1 but is given 0 parameters",
    );
    const hidden = `SELECT '$2', E'\\'$3', "col$4", $$ $5 $$, $tag$ $6 $tag$, a$7 -- $8
      /* $9 /* $10 */ */ FROM t WHERE x = $1`;
    assert.equal(placeholderMismatch(hidden, "postgres", 1), undefined);
  });

  it("SQL Server: a @pN beyond the parameters always disagrees; an unused one only when strict", () => {
    assert.equal(placeholderMismatch("SELECT @p1, @P2", "sqlserver", 2), undefined);
    assert.equal(
      placeholderMismatch("SELECT @p2", "sqlserver", 1),
      "it refers to @p2 but is given 1 parameter",
    );
    assert.equal(placeholderMismatch("SELECT @p1", "sqlserver", 2), undefined, "the server accepts it");
    assert.match(placeholderMismatch("SELECT @p1", "sqlserver", 2, true)!, /never refers to @p2/);
    assert.equal(
      placeholderMismatch("SELECT '@p2', [@p3], @@ROWCOUNT, @p1 -- @p4", "sqlserver", 1, true),
      undefined,
    );
    assert.match(placeholderMismatch("SELECT @p01", "sqlserver", 1)!, /@p01, which no parameter binds/);
  });
});

describe("the fakes check placeholders against parameters", () => {
  const text = "SELECT 1 WHERE $1::text IS NOT NULL";

  it("fakeTransaction refuses a statement whose parameters disagree, naming it, and records only those that agree", async () => {
    const tx = fakeTransaction();
    await assert.rejects(
      tx.query(text, ["x", "m-1"]),
      (error: Error) => error.message.includes(`"${text}"`) && error.message.includes("never refers to $2"),
    );
    await tx.query(text, ["x"]);
    assert.deepEqual(tx.statements, [{ sql: text, params: ["x"] }]);
    const sqlserver = fakeTransaction({ dialect: "sqlserver" });
    await assert.rejects(sqlserver.query("SELECT @p1, @p2", [1]), /refers to @p2 but is given 1 parameter/);
    await assert.rejects(sqlserver.query("SELECT @p1", [1, 2]), /never refers to @p2/);
  });

  it("fakeStatements throws what the worker dead-letters with, naming the handler and the statement", () => {
    const handler: StatementsHandler<{ x: string }> = {
      kind: "statements",
      type: "orders.Checked",
      schema: z.object({ x: z.string() }),
      statements: (body, context) => [{ sql: text, params: [body.x, context.messageId] }],
    };
    assert.throws(
      () => fakeStatements(handler, { x: "a" }),
      (error: unknown) =>
        error instanceof DoNotRetryError &&
        error.message.includes('statements handler "orders.Checked"') &&
        error.message.includes(text) &&
        error.message.includes("never refers to $2"),
    );
    const fixed = { ...handler, statements: (body: { x: string }) => [{ sql: text, params: [body.x] }] };
    assert.equal(fakeStatements(fixed, { x: "a" }).length, 1);
    const sqlserverUnused = {
      ...handler,
      statements: (body: { x: string }) => [{ sql: "SELECT @p1", params: [body.x, "extra"] }],
    };
    assert.throws(
      () => fakeStatements(sqlserverUnused, { x: "a" }, { dialect: "sqlserver" }),
      /orders\.Checked.*never refers to @p2/,
    );
  });
});
