import assert from "node:assert/strict";
import { freePort } from "../../../src/embedded/free-port.ts";
import { createInboxStore } from "../../../src/inbox/index.ts";

describe("createInboxStore", () => {
  it("builds a store per database kind without connecting", async () => {
    const pg = createInboxStore({ kind: "postgres", url: "postgres://nobody@127.0.0.1:1/none" });
    const ms = createInboxStore({
      kind: "sqlserver",
      config: "Server=127.0.0.1,1;Database=none;User Id=x;Password=y",
    });
    assert.equal(pg.dialect, "postgres");
    assert.equal(ms.dialect, "sqlserver");
    await Promise.all([pg.close(), ms.close()]);
  });

  it("a SQL Server that cannot be reached yields the real driver error, classified unavailable", async () => {
    const port = await freePort(); // nothing listens there
    const store = createInboxStore({
      kind: "sqlserver",
      config: {
        server: "127.0.0.1",
        port,
        user: "sa",
        password: "unused",
        options: { trustServerCertificate: true },
        connectionTimeout: 5000,
      },
    });
    try {
      const error = await store.ping().then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(error instanceof Error, "ping must fail");
      assert.equal(error.name, "ConnectionError");
      assert.equal(store.classify(error), "unavailable");
      const outcome = await store.process({ messageId: "m", consumer: "c" }, () => Promise.resolve());
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "unavailable");
    } finally {
      await store.close();
    }
  });
});
