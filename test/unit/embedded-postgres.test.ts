import assert from "node:assert/strict";
import pg from "pg";
import { createTestDatabase } from "../helpers/postgres.ts";

describe("embedded PostgreSQL test server", () => {
  it("serves a fresh database per caller on 127.0.0.1", async () => {
    const url = await createTestDatabase("smoke");
    assert.match(url, /@127\.0\.0\.1:\d+\//);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'",
      );
      assert.equal(rows[0]?.n, 0);
    } finally {
      await client.end();
    }
  });
});
