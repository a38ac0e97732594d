import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import { run } from "../../src/cli/migrate.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const bin = fileURLToPath(new URL("../../bin/sbinbox.js", import.meta.url));

describe("sbinbox migrate", function () {
  it("applies pending migrations through the real command, then is a no-op", async function () {
    const url = await createTestDatabase("inbox_migrate_cli");
    const env = { ...process.env, SBINBOX_POSTGRES_URL: url, SBINBOX_SQLSERVER_CONNECTION_STRING: "" };
    const first = await promisify(execFile)(process.execPath, [bin, "migrate"], { env });
    assert.match(first.stdout, /applied 0001_inbox/);
    const second = await promisify(execFile)(process.execPath, [bin, "migrate"], { env });
    assert.match(second.stdout, /up to date/);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "SbInboxSchemaVersion"`,
      );
      assert.equal(rows[0]?.n, 1);
    } finally {
      await client.end();
    }
  });

  it("refuses to run without a database, naming the settings", async function () {
    const out: string[] = [];
    const err: string[] = [];
    assert.equal(
      await run(
        [],
        {},
        (l) => out.push(l),
        (l) => err.push(l),
      ),
      2,
    );
    assert.equal(out.length, 0);
    assert.match(err[0] ?? "", /SBINBOX_POSTGRES_URL or SBINBOX_SQLSERVER_CONNECTION_STRING: not set/);
    const both = { SBINBOX_POSTGRES_URL: "postgres://x", SBINBOX_SQLSERVER_CONNECTION_STRING: "Server=x" };
    assert.equal(
      await run(
        [],
        both,
        (l) => out.push(l),
        (l) => err.push(l),
      ),
      2,
    );
    assert.match(err[1] ?? "", /set only one/);
  });
});
