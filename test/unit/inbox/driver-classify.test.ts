import assert from "node:assert/strict";
import { PostgresDriver } from "../../../src/inbox/postgres/adapter.ts";
import { SqlServerDriver } from "../../../src/inbox/sqlserver/adapter.ts";

const timeouts = { connectMs: 2_000, statementMs: 2_000, keepAliveMs: 1_000 };

/** What handlers throw when their own downstream (HTTP, a cache) is down: nothing to do with the database. */
function handlerNetworkErrors(): Error[] {
  return [
    Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6379"), { code: "ECONNREFUSED" }),
    new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } }),
    new Error("order failed", {
      cause: Object.assign(new Error("connect ECONNREFUSED 10.0.0.9:443"), { code: "ECONNREFUSED" }),
    }),
    new AggregateError([Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" })], "all failed"),
  ];
}

/** The wrappings handlers put around an error they caught from their transaction. */
function wrapped(error: unknown): Array<[string, unknown]> {
  return [
    ["as raised", error],
    ["new Error(msg, { cause })", new Error("could not record the order", { cause: error })],
    ["two causes deep", new Error("outer", { cause: new Error("inner", { cause: error }) })],
    ["AggregateError", new AggregateError([new Error("other"), error], "order failed")],
  ];
}

// Real drivers, each failing to reach a closed port: the error objects are the ones their connection raises.
describe("the drivers' classify: the store's own errors through any wrapping, the handler's never an outage", function () {
  this.timeout(20_000);

  it("PostgreSQL", async () => {
    const driver = new PostgresDriver({ url: "postgres://u:p@127.0.0.1:1/db", timeouts });
    try {
      const raised = await driver.begin().then(
        () => assert.fail("connected to a closed port"),
        (e: unknown) => e,
      );
      for (const [label, error] of wrapped(raised))
        assert.equal(driver.classify(error, "other"), "unavailable", label);
      for (const error of handlerNetworkErrors())
        assert.equal(driver.classify(error, "other"), "permanent", error.message);
    } finally {
      await driver.close();
    }
  });

  it("SQL Server", async () => {
    const driver = new SqlServerDriver({
      config: {
        server: "127.0.0.1",
        port: 1,
        user: "u",
        password: "p",
        options: { trustServerCertificate: true },
      },
      timeouts,
    });
    try {
      const raised = await driver.begin().then(
        () => assert.fail("connected to a closed port"),
        (e: unknown) => e,
      );
      for (const [label, error] of wrapped(raised))
        assert.equal(driver.classify(error, "other"), "unavailable", label);
      for (const error of handlerNetworkErrors())
        assert.equal(driver.classify(error, "other"), "permanent", error.message);
    } finally {
      await driver.close().catch(() => undefined);
    }
  });
});
