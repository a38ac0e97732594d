import assert from "node:assert/strict";
import mssql from "mssql";
import { bindParameters, poolConfig } from "../../src/inbox/sqlserver/adapter.ts";
import { statements } from "../../src/inbox/sqlserver/statements.ts";

describe("SQL Server adapter: positional parameters become typed @p1..@pn", () => {
  it("binds each value with an explicit type", () => {
    const cutoff = new Date("2026-01-02T03:04:05.678Z");
    const request = bindParameters(new mssql.Request(), [
      "msg-1",
      42,
      5_000_000_000,
      1.5,
      cutoff,
      true,
      null,
    ]);
    const p = request.parameters;
    assert.deepEqual(Object.keys(p), ["p1", "p2", "p3", "p4", "p5", "p6", "p7"]);
    assert.equal(p.p1?.type, mssql.NVarChar);
    assert.equal(p.p1?.length, 4000, "a bounded nvarchar, so an index seek on MessageId stays a seek");
    assert.equal(p.p2?.type, mssql.Int);
    assert.equal(p.p3?.type, mssql.BigInt);
    assert.equal(p.p4?.type, mssql.Float);
    assert.equal(p.p5?.type, mssql.DateTime2);
    assert.equal(p.p5?.scale, 3);
    assert.equal(p.p5?.value, cutoff);
    assert.equal(p.p6?.type, mssql.Bit);
    assert.equal(p.p7?.value, null);
  });

  it("every statement uses only @p1..@pn parameter names (and the local variables it declares)", () => {
    const all: Record<string, string> = { ...statements };
    for (const [name, sql] of Object.entries(all)) {
      // Variables of the statement's own DECLARE are local: they are not parameters the adapter must bind.
      const declared = new Set(
        [...sql.matchAll(/DECLARE\s+([^;]+);/gi)].flatMap((m) => m[1]!.match(/@\w+(?=\s+\w)/g) ?? []),
      );
      const params = (sql.match(/@@?\w+/g) ?? []).filter((p) => !p.startsWith("@@") && !declared.has(p));
      for (const param of params) assert.match(param, /^@p\d+$/, `${name} uses ${param}`);
    }
  });

  it("turns XACT_ABORT on for pools it builds, unless the caller set it", () => {
    const fromString = poolConfig("Server=127.0.0.1,1433;Database=app;User Id=u;Password=p;Encrypt=true");
    assert.equal(fromString.options?.abortTransactionOnError, true);
    assert.equal(fromString.database, "app");
    assert.equal(
      poolConfig({ server: "s", options: { abortTransactionOnError: false } }).options
        ?.abortTransactionOnError,
      false,
    );
  });
});

describe("SQL Server pool config: every wait bounded", () => {
  it("connect, pool acquire, request and cancel timeouts come from the settings; XACT_ABORT is on", () => {
    const config = poolConfig("Server=db;Database=inbox;User Id=u;Password=p", {
      connectMs: 2_000,
      statementMs: 3_000,
      keepAliveMs: 10_000,
    });
    assert.equal(config.connectionTimeout, 2_000);
    assert.equal(config.requestTimeout, 3_000);
    assert.equal(config.pool?.acquireTimeoutMillis, 2_000);
    assert.equal(config.options?.cancelTimeout, 1_000);
    assert.equal(config.options?.abortTransactionOnError, true);
  });

  it("values the connection string gives win", () => {
    const config = poolConfig("Server=db;Database=inbox;Connect Timeout=7;Request Timeout=9000");
    assert.equal(config.connectionTimeout, 7_000);
    assert.equal(config.requestTimeout, 9_000);
  });
});
