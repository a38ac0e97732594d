import assert from "node:assert/strict";
import pg from "pg";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";

/** Its own server: the settings are the server's (bench:inbox-growth runs one with a small cache). */
describe("embedded PostgreSQL: server settings", function () {
  this.timeout(120_000);
  let server: EmbeddedPostgresServer | undefined;

  after(async function () {
    await server?.dispose();
  });

  it("starts with the settings given, preloaded libraries included, and keeps its own", async function () {
    server = await EmbeddedPostgresServer.create({
      settings: { shared_buffers: "16MB", shared_preload_libraries: "pg_stat_statements" },
    });
    const client = new pg.Client({ connectionString: server.url() });
    await client.connect();
    try {
      const show = async (name: string) =>
        (await client.query<Record<string, string>>(`SHOW ${name}`)).rows[0]![name];
      assert.equal(await show("shared_buffers"), "16MB");
      assert.equal(await show("shared_preload_libraries"), "pg_stat_statements");
      // The module's own flags still hold beside them.
      assert.equal(await show("listen_addresses"), "127.0.0.1");
      await client.query("CREATE EXTENSION pg_stat_statements");
      const calls = await client.query<{ n: string }>("SELECT count(*) AS n FROM pg_stat_statements");
      assert.ok(Number(calls.rows[0]!.n) > 0);
    } finally {
      await client.end();
    }
  });
});
