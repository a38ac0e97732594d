import assert from "node:assert/strict";
import { keyLocked, postgresBackend, type BackendDatabase } from "./backends.ts";
import { REQUIRE_ALL_ENV, skipFor } from "./guards.ts";
import { probeServer } from "./server-features.ts";

/**
 * A skip is for a feature the server lacks, never for the project's own statement failing: on PostgreSQL, which
 * has every feature, a broken project statement leaves the probes saying "present", so its test runs and fails.
 */
describe("feature probes: a broken project statement fails, it does not skip", function () {
  let db: BackendDatabase;

  before(async function () {
    db = await postgresBackend.database("server_features");
    // The key probe names its consumer by the InboxConsumer Id, so the probe runs on a migrated inbox.
    await db.createStore().migrate();
  });

  after(async function () {
    await db?.dispose();
  });

  it("PostgreSQL lacks nothing the suites probe for", async function () {
    assert.deepEqual(await probeServer(db), {});
  });

  it("a typo in the key probe leaves the feature present, and the probe itself then throws", async function () {
    const broken = {
      ...db,
      sql: { ...db.sql, probeKeyLocked: db.sql.probeKeyLocked.replace("INSERT", "INSRET") },
    };
    assert.deepEqual(
      await probeServer(broken),
      {},
      "the server's features do not depend on the project's SQL",
    );
    await assert.rejects(keyLocked(broken, "m-1", "c-1"), /syntax error/);
  });

  it("skipFor skips with the reason in the title, and fails instead under SBINBOX_TEST_REQUIRE_ALL=1", function () {
    let skipped = 0;
    const context = { test: { title: "t" }, skip: () => (skipped += 1) } as unknown as Mocha.Context;
    const before = process.env[REQUIRE_ALL_ENV];
    try {
      delete process.env[REQUIRE_ALL_ENV];
      skipFor(context, undefined);
      skipFor(context, "no view");
      assert.equal(skipped, 1);
      assert.equal(context.test?.title, "t [skipped: no view]");
      process.env[REQUIRE_ALL_ENV] = "1";
      assert.throws(() => skipFor(context, "no view"), /may not be skipped .*no view/);
      assert.equal(skipped, 1);
    } finally {
      if (before === undefined) delete process.env[REQUIRE_ALL_ENV];
      else process.env[REQUIRE_ALL_ENV] = before;
    }
  });
});
