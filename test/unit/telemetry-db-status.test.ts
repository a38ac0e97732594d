import assert from "node:assert/strict";
import mssql from "mssql";
import pg from "pg";
import * as tedious from "tedious";
import { dbStatusCode } from "../../src/telemetry/inbox-tracing.ts";

/** tedious's RequestError for one server error token, as its token handler builds it. */
function tediousError(number: number, message: string): tedious.RequestError {
  return Object.assign(new tedious.RequestError(message, "EREQUEST"), { number, state: 1, class: 14 });
}

describe("telemetry: db.response.status_code from real driver errors", () => {
  it("is the SQL Server error number, wherever mssql keeps it", () => {
    const direct = tediousError(2627, "Violation of UNIQUE KEY constraint 'IX_Inbox_MessageId_Consumer'.");
    assert.equal(dbStatusCode("sqlserver", direct), "2627");
    // mssql's request callback path: tedious's error wrapped as originalError.
    assert.equal(dbStatusCode("sqlserver", new mssql.RequestError(direct, "EREQUEST")), "2627");
    // mssql's errorMessage path: the token as `info` on an inner error.
    const info = Object.assign(new Error("deadlock"), {
      info: { number: 1205, state: 51, class: 13, message: "deadlock" },
    });
    assert.equal(dbStatusCode("sqlserver", new mssql.RequestError(info, "EREQUEST")), "1205");
  });

  it("is the PostgreSQL SQLSTATE of a server error", () => {
    const error = new pg.DatabaseError("duplicate key value violates unique constraint", 100, "error");
    // The fields pg's protocol parser fills from the server's ErrorResponse.
    error.severity = "ERROR";
    error.code = "23505";
    assert.equal(dbStatusCode("postgres", error), "23505");
  });

  it("is absent when the server never answered", () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
    assert.equal(dbStatusCode("postgres", refused), undefined);
    const pipe = Object.assign(new Error("write EPIPE"), { code: "EPIPE" });
    assert.equal(dbStatusCode("postgres", pipe), undefined);
    assert.equal(
      dbStatusCode("sqlserver", new mssql.ConnectionError("Failed to connect", "ESOCKET")),
      undefined,
    );
    assert.equal(dbStatusCode("postgres", "not an error"), undefined);
  });
});
