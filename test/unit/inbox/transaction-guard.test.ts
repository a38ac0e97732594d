import assert from "node:assert/strict";
import type { Dialect } from "../../../src/domain/sql.ts";
import { refusedStatement } from "../../../src/inbox/transaction-guard.ts";

describe("the transaction handle's guard: what a handler may not send", () => {
  const refusedPostgres: [string, string][] = [
    ["COMMIT", "COMMIT"],
    ["commit;", "COMMIT"],
    ["END", "END"],
    ["ABORT", "ABORT"],
    ["ROLLBACK", "ROLLBACK"],
    ["ROLLBACK AND CHAIN", "ROLLBACK"],
    ["BEGIN", "BEGIN"],
    ["START TRANSACTION", "START"],
    ["PREPARE TRANSACTION 'x'", "PREPARE TRANSACTION"],
    ["SET search_path TO evil", "SET"],
    ["SET SESSION statement_timeout = 0", "SET"],
    ["RESET ALL", "RESET"],
    ["DISCARD ALL", "DISCARD"],
    ["LISTEN channel", "LISTEN"],
    ["SELECT 1; COMMIT", "COMMIT"],
    ["/* a comment */ -- another\n  COMMIT", "COMMIT"],
    ["INSERT INTO t VALUES ('it''s; fine'); SET x = 1", "SET"],
    // After an escape string (a backslash-escaped quote inside), the next statement is still read.
    ["INSERT INTO audit(note) VALUES (E'it\\'s'); COMMIT", "COMMIT"],
    ["SELECT e'a\\\\'; COMMIT", "COMMIT"],
  ];
  const allowedPostgres = [
    `UPDATE "Accounts" SET "Balance" = "Balance" + $1 WHERE "Id" = $2`,
    "SET LOCAL statement_timeout = '5s'",
    "SET CONSTRAINTS ALL DEFERRED",
    "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    "SAVEPOINT s1",
    "ROLLBACK TO SAVEPOINT s1",
    "ROLLBACK TO s1",
    "RELEASE SAVEPOINT s1",
    "SELECT 'COMMIT'",
    `SELECT "commit" FROM t`,
    "SELECT $$; COMMIT $$",
    "SELECT 1 /* ; COMMIT /* nested */ still comment */",
    "PREPARE q AS SELECT 1",
    // E'' strings take backslash escapes: the \' does not end the string, so its COMMIT is text.
    "INSERT INTO audit(note) VALUES (E'it\\'s; commit; ok')",
    "SELECT e'\\'' || ';COMMIT'",
    "SELECT E'it''s; commit'",
  ];
  const refusedSqlServer: [string, string][] = [
    ["COMMIT", "COMMIT"],
    ["COMMIT TRANSACTION", "COMMIT"],
    ["ROLLBACK", "ROLLBACK"],
    ["ROLLBACK TRAN", "ROLLBACK"],
    ["ROLLBACK TRANSACTION;", "ROLLBACK"],
    ["BEGIN TRAN", "BEGIN TRANSACTION"],
    ["BEGIN DISTRIBUTED TRANSACTION", "BEGIN TRANSACTION"],
    ["SELECT 1 COMMIT", "COMMIT"],
    ["SET XACT_ABORT OFF", "SET XACT_ABORT"],
    ["SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", "SET TRANSACTION"],
    ["SET IMPLICIT_TRANSACTIONS ON", "SET IMPLICIT_TRANSACTIONS"],
    ["SET LOCK_TIMEOUT 0", "SET LOCK_TIMEOUT"],
    ["USE master", "USE"],
    ["SELECT 1; USE master", "USE"],
    ["SELECT o.Id FROM dbo.Orders o OPTION (RECOMPILE) USE master", "USE"],
  ];
  const allowedSqlServer = [
    "UPDATE dbo.Accounts SET Balance = Balance + @p1 WHERE Id = @p2",
    "UPDATE a SET a.Balance += @p1 FROM dbo.Accounts a",
    "DECLARE @n int; SET @n = 1; SELECT @n AS n",
    "SAVE TRANSACTION s1",
    "ROLLBACK TRANSACTION s1",
    "BEGIN TRY SELECT 1 END TRY BEGIN CATCH SELECT 2 END CATCH",
    "SELECT N'COMMIT' AS word, [commit] FROM dbo.T",
    "-- COMMIT\nSELECT 1",
    // Query hints: USE inside OPTION (...) is not the USE statement.
    "SELECT o.Id FROM dbo.Orders o WHERE o.Id = @p1 OPTION (USE HINT ('DISABLE_OPTIMIZER_ROWGOAL'))",
    "SELECT * FROM dbo.Orders OPTION (RECOMPILE, USE HINT('FORCE_LEGACY_CARDINALITY_ESTIMATION'))",
    "SELECT * FROM dbo.Orders OPTION (USE PLAN N'<ShowPlanXML/>')",
  ];

  for (const [sql, word] of refusedPostgres) {
    it(`PostgreSQL refuses ${JSON.stringify(sql)} (${word})`, () => {
      assert.equal(refusedStatement(sql, "postgres"), word);
    });
  }
  for (const sql of allowedPostgres) {
    it(`PostgreSQL allows ${JSON.stringify(sql)}`, () => {
      assert.equal(refusedStatement(sql, "postgres"), undefined);
    });
  }
  for (const [sql, word] of refusedSqlServer) {
    it(`SQL Server refuses ${JSON.stringify(sql)} (${word})`, () => {
      assert.equal(refusedStatement(sql, "sqlserver"), word);
    });
  }
  for (const sql of allowedSqlServer) {
    it(`SQL Server allows ${JSON.stringify(sql)}`, () => {
      assert.equal(refusedStatement(sql, "sqlserver"), undefined);
    });
  }

  // Beside other handlers on one transaction, and among a statements handler's statements, a savepoint would reach
  // past the handler's own writes; a statements handler's DECLARE would be made again by the next message's.
  const savepoints: [string, Dialect, string][] = [
    ["SAVEPOINT s1", "postgres", "SAVEPOINT"],
    ["select 1; savepoint s1", "postgres", "SAVEPOINT"],
    ["ROLLBACK TO SAVEPOINT s1", "postgres", "ROLLBACK TO"],
    ["ROLLBACK TO s1", "postgres", "ROLLBACK TO"],
    ["RELEASE SAVEPOINT s1", "postgres", "RELEASE"],
    ["RELEASE s1", "postgres", "RELEASE"],
    ["SAVE TRANSACTION s1", "sqlserver", "SAVE TRANSACTION"],
    ["SAVE TRAN @name", "sqlserver", "SAVE TRANSACTION"],
    ["ROLLBACK TRANSACTION s1", "sqlserver", "ROLLBACK TRANSACTION savepoint"],
    ["UPDATE dbo.T SET x = 1 ROLLBACK TRAN s1", "sqlserver", "ROLLBACK TRANSACTION savepoint"],
  ];
  for (const [sql, dialect, word] of savepoints) {
    it(`${dialect}: ${JSON.stringify(sql)} is allowed alone, refused alongside others and among statements`, () => {
      assert.equal(refusedStatement(sql, dialect), undefined);
      assert.equal(refusedStatement(sql, dialect, "alongside"), word);
      assert.equal(refusedStatement(sql, dialect, "statements"), word);
    });
  }
  const declares: [string, Dialect][] = [
    ["DECLARE @n int = @p1; UPDATE dbo.T SET x = x + @n WHERE id = 1", "sqlserver"],
    ["UPDATE dbo.T SET x = 1; declare @n int", "sqlserver"],
    ["DECLARE c CURSOR FOR SELECT 1", "postgres"],
  ];
  for (const [sql, dialect] of declares) {
    it(`${dialect}: ${JSON.stringify(sql)} is refused among a statements handler's statements only`, () => {
      assert.equal(refusedStatement(sql, dialect), undefined);
      assert.equal(refusedStatement(sql, dialect, "alongside"), undefined);
      assert.equal(refusedStatement(sql, dialect, "statements"), "DECLARE");
    });
  }
  it("the stricter rules refuse what the handler's rules refuse, and allow the rest", () => {
    for (const rules of ["alongside", "statements"] as const) {
      assert.equal(refusedStatement("COMMIT", "postgres", rules), "COMMIT");
      assert.equal(refusedStatement("SET NOCOUNT ON", "sqlserver", rules), "SET NOCOUNT");
      assert.equal(refusedStatement(`SELECT 'SAVEPOINT s', "release" FROM t`, "postgres", rules), undefined);
      assert.equal(
        refusedStatement("SELECT N'SAVE TRAN s' AS t, [declare] FROM dbo.T", "sqlserver", rules),
        undefined,
      );
      assert.equal(refusedStatement("-- ROLLBACK TO s\nSELECT 1", "postgres", rules), undefined);
    }
  });

  it("a statement seen before keeps its verdict (the verdicts are cached per dialect)", () => {
    for (let i = 0; i < 3; i += 1) {
      assert.equal(refusedStatement("COMMIT", "postgres"), "COMMIT");
      assert.equal(refusedStatement("SELECT 1", "postgres"), undefined);
      assert.equal(refusedStatement("SET NOCOUNT ON", "sqlserver"), "SET NOCOUNT");
      assert.equal(refusedStatement("SET LOCAL x = 1", "postgres"), undefined);
    }
  });
});
