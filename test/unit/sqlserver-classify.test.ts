import assert from "node:assert/strict";
import mssql from "mssql";
import * as tedious from "tedious";
import { classifySqlServerError, SQLSERVER_ERROR_NUMBERS } from "../../src/inbox/sqlserver/classify.ts";

/** An ERROR token as tedious's token parser yields it. */
interface ErrorToken {
  number: number;
  state: number;
  class: number;
  message: string;
  serverName: string;
  procName: string;
  lineNumber: number;
}

function token(number: number, message: string, cls = 14): ErrorToken {
  return { number, state: 1, class: cls, message, serverName: "sql-test", procName: "", lineNumber: 1 };
}

/** tedious's RequestError, built as its token handler's onErrorMessage builds it. */
function tediousRequestError(t: ErrorToken): tedious.RequestError {
  const error = new tedious.RequestError(t.message, "EREQUEST");
  Object.assign(error, {
    number: t.number,
    state: t.state,
    class: t.class,
    serverName: t.serverName,
    procName: t.procName,
    lineNumber: t.lineNumber,
  });
  return error;
}

/** mssql's path through its 'errorMessage' listener: an Error carrying the token as `info`, wrapped. */
function mssqlFromInfo(t: ErrorToken): mssql.RequestError {
  const inner = Object.assign(new Error(t.message), { info: t });
  return new mssql.RequestError(inner, "EREQUEST");
}

/** mssql's path through the request callback: tedious's error wrapped (mssql copies `code`, not `number`). */
function mssqlFromTedious(e: Error): mssql.RequestError {
  return new mssql.RequestError(e, "EREQUEST");
}

/** Several errors in one request: the last is raised, the others ride along as precedingErrors. */
function withPreceding(last: mssql.RequestError, preceding: mssql.RequestError[]): mssql.RequestError {
  return Object.assign(last, { precedingErrors: preceding });
}

const DUP_2627 = token(
  2627,
  "Violation of UNIQUE KEY constraint 'IX_Inbox_MessageId_Consumer'. Cannot insert duplicate key in object 'dbo.Inbox'.",
);
const DUP_2601 = token(
  2601,
  "Cannot insert duplicate key row in object 'dbo.Inbox' with unique index 'IX_Inbox_MessageId_Consumer'.",
);
// The same error under a German session language: the number decides, not the words.
const DUP_2601_DE = token(
  2601,
  "Eine Zeile mit doppeltem Schlüssel kann in das dbo.Inbox-Objekt mit dem eindeutigen IX_Inbox_MessageId_Consumer-Index nicht eingefügt werden.",
);
const DEADLOCK = token(
  1205,
  "Transaction (Process ID 57) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction.",
  13,
);

describe("SQL Server error classification (real mssql/tedious error objects)", () => {
  it("2601 and 2627 raised by the marker insert are duplicates, on either mssql path and in any language", () => {
    for (const t of [DUP_2627, DUP_2601, DUP_2601_DE]) {
      assert.equal(classifySqlServerError(mssqlFromInfo(t), "marker"), "duplicate", `info path ${t.number}`);
      const wrapped = mssqlFromTedious(tediousRequestError(t));
      assert.equal(wrapped.number, "EREQUEST", "mssql copies the code, the number stays on originalError");
      assert.equal(classifySqlServerError(wrapped, "marker"), "duplicate", `tedious path ${t.number}`);
    }
  });

  it("a 2627 raised by a business statement is a failure, not a duplicate", () => {
    const business = token(
      2627,
      "Violation of UNIQUE KEY constraint 'UX_Orders_OrderNo'. Cannot insert duplicate key in object 'dbo.Orders'.",
    );
    assert.equal(classifySqlServerError(mssqlFromInfo(business), "other"), "permanent");
    assert.equal(
      classifySqlServerError(mssqlFromTedious(tediousRequestError(business)), "other"),
      "permanent",
    );
    // Even the inbox's own index, when some other statement hit it.
    assert.equal(classifySqlServerError(mssqlFromInfo(DUP_2627), "other"), "permanent");
  });

  it("message text that speaks of duplicates does not make a duplicate", () => {
    const fk = token(
      547,
      "The INSERT statement conflicted with ... Cannot insert duplicate key (not really)",
      16,
    );
    assert.equal(classifySqlServerError(mssqlFromInfo(fk), "marker"), "permanent");
  });

  it("a deadlock victim (1205) is transient, also inside an AggregateError or behind precedingErrors", () => {
    assert.equal(classifySqlServerError(mssqlFromInfo(DEADLOCK), "other"), "transient");
    const trigger = token(50000, "raised by a trigger", 16);
    const aggregate = new AggregateError([tediousRequestError(trigger), tediousRequestError(DEADLOCK)]);
    assert.equal(classifySqlServerError(mssqlFromTedious(aggregate), "other"), "transient");
    const chained = withPreceding(mssqlFromInfo(trigger), [mssqlFromInfo(DEADLOCK)]);
    assert.equal(classifySqlServerError(chained, "other"), "transient");
  });

  describe("each error number in the table", () => {
    for (const entry of SQLSERVER_ERROR_NUMBERS) {
      it(`${entry.number} (${entry.name}) is ${entry.errorClass}`, () => {
        assert.equal(
          classifySqlServerError(mssqlFromInfo(token(entry.number, `error ${entry.number}`, 20)), "marker"),
          entry.errorClass,
        );
        assert.equal(
          classifySqlServerError(
            mssqlFromTedious(tediousRequestError(token(entry.number, "e", 20))),
            "other",
          ),
          entry.errorClass,
        );
      });
    }
  });

  it("connection and login errors raised outside the store's connection are the handler's failure", () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 10.0.0.9:443"), { code: "ECONNREFUSED" });
    assert.equal(classifySqlServerError(refused, "other", true), "unavailable");
    assert.equal(classifySqlServerError(refused, "other", false), "permanent");
    const closed = new mssql.ConnectionError("Connection is closed.", "ECONNCLOSED");
    assert.equal(classifySqlServerError(closed, "other", false), "permanent");
    const login = mssqlFromInfo(token(18456, "Login failed for user", 14));
    assert.equal(classifySqlServerError(login, "other", false), "permanent");
    assert.equal(classifySqlServerError(login, "other", true), "unavailable");
  });

  it("a lost connection is unavailable", () => {
    // tedious fails the in-flight request when the socket closes; mssql wraps it (and keeps its code).
    const closed = mssqlFromTedious(
      new tedious.RequestError("Connection closed before request completed.", "ECLOSE"),
    );
    assert.equal(closed.code, "ECLOSE");
    assert.equal(classifySqlServerError(closed, "marker"), "unavailable");
    // A request on a pool whose connection is gone.
    assert.equal(
      classifySqlServerError(new mssql.ConnectionError("Connection is closed.", "ECONNCLOSED"), "other"),
      "unavailable",
    );
    // Connecting fails: tedious's ConnectionError (ESOCKET), wrapped by mssql's pool.
    const socket = new tedious.ConnectionError(
      "Failed to connect to 127.0.0.1:1433 - connect ECONNREFUSED",
      "ESOCKET",
    );
    assert.equal(
      classifySqlServerError(new mssql.ConnectionError(socket as unknown as string), "other"),
      "unavailable",
    );
    // Several addresses tried: tedious's connector raises an AggregateError of the attempts.
    const attempts = new AggregateError(
      [Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1433"), { code: "ECONNREFUSED" })],
      "Could not connect (sequence)",
    );
    assert.equal(
      classifySqlServerError(new mssql.ConnectionError(attempts as unknown as string), "other"),
      "unavailable",
    );
  });

  it("anything else is permanent", () => {
    assert.equal(
      classifySqlServerError(mssqlFromInfo(token(208, "Invalid object name 'dbo.Nope'.", 16)), "other"),
      "permanent",
    );
    assert.equal(classifySqlServerError(new Error("handler bug"), "other"), "permanent");
    assert.equal(classifySqlServerError(undefined, "other"), "permanent");
  });
});
