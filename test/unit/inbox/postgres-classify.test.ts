import assert from "node:assert/strict";
import pg from "pg";
import { classifyPostgresError, POSTGRES_SQLSTATES } from "../../../src/inbox/postgres/classify.ts";

/** A server error as pg-protocol's parser builds it from an ErrorResponse. */
function serverError(code: string, fields: Partial<pg.DatabaseError> = {}): pg.DatabaseError {
  const error = new pg.DatabaseError("server says no", 100, "error");
  return Object.assign(error, { severity: "ERROR", code, ...fields });
}

describe("PostgreSQL error classification", () => {
  it("23505 on the inbox index from the marker insert is a duplicate; on any other index or statement it is not", () => {
    const inbox = serverError("23505", { constraint: "IX_Inbox_MessageKey_ConsumerId", table: "Inbox" });
    assert.equal(classifyPostgresError(inbox, "marker", true), "duplicate");
    assert.equal(classifyPostgresError(inbox, "other", true), "permanent");
    const business = serverError("23505", { constraint: "UX_Orders_OrderNo", table: "Orders" });
    assert.equal(classifyPostgresError(business, "marker", true), "permanent");
    // The table before migration 0002 keeps its index's name; nothing inserts there any more.
    const legacy = serverError("23505", { constraint: "IX_Inbox_MessageId_Consumer", table: "InboxLegacy" });
    assert.equal(classifyPostgresError(legacy, "marker", true), "permanent");
    const lowerCase = serverError("23505", { constraint: "ix_inbox_messagekey_consumerid" });
    assert.equal(
      classifyPostgresError(lowerCase, "marker", true),
      "permanent",
      "the name must match exactly",
    );
  });

  it("serialization failures and deadlocks are transient", () => {
    assert.equal(classifyPostgresError(serverError("40001"), "other", true), "transient");
    assert.equal(classifyPostgresError(serverError("40P01"), "other", true), "transient");
  });

  it("shutdown, connection exceptions and socket errors are unavailable", () => {
    for (const code of ["57P01", "57P02", "57P03", "08006", "08001", "53300"]) {
      assert.equal(classifyPostgresError(serverError(code), "other", true), "unavailable", code);
    }
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
    assert.equal(classifyPostgresError(refused, "other", true), "unavailable");
    assert.equal(classifyPostgresError(new AggregateError([refused]), "other", true), "unavailable");
  });

  it("the same socket errors thrown by handler code are the handler's failure, never an outage", () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 10.0.0.9:443"), { code: "ECONNREFUSED" });
    assert.equal(classifyPostgresError(refused, "other", false), "permanent");
    assert.equal(classifyPostgresError(new AggregateError([refused]), "other", false), "permanent");
    assert.equal(classifyPostgresError(serverError("57P01"), "other", false), "permanent");
  });

  it("pg's code-less connection errors are unavailable only when the driver raised them", () => {
    const terminated = new Error("Connection terminated unexpectedly");
    assert.equal(classifyPostgresError(terminated, "other", true), "unavailable");
    assert.equal(classifyPostgresError(new Error("handler bug"), "other", false), "permanent");
    assert.equal(classifyPostgresError(new TypeError("bad parameter"), "other", true), "permanent");
  });

  it("08P01, a statement bound with the wrong number of parameters, is the handler's: permanent, not its class's outage", () => {
    assert.equal(classifyPostgresError(serverError("08P01"), "other", true), "permanent");
    assert.equal(classifyPostgresError(serverError("08006"), "other", true), "unavailable");
  });

  it("other server errors are permanent", () => {
    assert.equal(classifyPostgresError(serverError("42P01"), "other", true), "permanent");
    assert.equal(classifyPostgresError(serverError("23503"), "marker", true), "permanent");
  });

  describe("each SQLSTATE in the table", () => {
    for (const entry of POSTGRES_SQLSTATES) {
      // A class entry ("08") is checked with a code of that class no other entry names.
      const code = entry.code.length === 2 ? `${entry.code}0Z9` : entry.code;
      it(`${code} (${entry.name}) is ${entry.errorClass}`, () => {
        assert.equal(classifyPostgresError(serverError(code), "other", true), entry.errorClass);
        assert.equal(classifyPostgresError(serverError(code), "marker", true), entry.errorClass);
      });
    }

    it("the login refusals of the issue are all unavailable", () => {
      for (const code of ["28000", "28P01", "08001", "08006", "3D000", "53300", "57P01", "57P02", "57P03"]) {
        assert.equal(classifyPostgresError(serverError(code), "other", true), "unavailable", code);
      }
    });
  });
});
