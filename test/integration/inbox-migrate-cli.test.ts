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
    // The inbox's migration, then the handler module's (the example's when SBINBOX_HANDLERS is unset).
    assert.match(first.stdout, /applied 0001_inbox, example:0001_example_accounts\n/);
    const second = await promisify(execFile)(process.execPath, [bin, "migrate"], { env });
    assert.match(second.stdout, /up to date/);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "SbInboxSchemaVersion"`,
      );
      assert.equal(rows[0]?.n, 1);
      const modules = await client.query<{ Module: string; Version: number }>(
        `SELECT "Module", "Version" FROM "SbInboxModuleVersion"`,
      );
      assert.deepEqual(modules.rows, [{ Module: "example", Version: 1 }]);
    } finally {
      await client.end();
    }
  });

  it("applies the migrations of the module SBINBOX_HANDLERS names, on a track of its own", async function () {
    const url = await createTestDatabase("migrate_team_module");
    const env = {
      ...process.env,
      SBINBOX_POSTGRES_URL: url,
      SBINBOX_SQLSERVER_CONNECTION_STRING: "",
      SBINBOX_HANDLERS: "./handlers/index.ts",
    };
    const cwd = fileURLToPath(new URL("../..", import.meta.url));
    const first = await promisify(execFile)(process.execPath, [bin, "migrate"], { env, cwd });
    assert.match(first.stdout, /applied 0001_inbox, notes:0001_notes\n/);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(`INSERT INTO notes (note_id, text, message_id) VALUES (1, 'a', 'm1')`);
      const example = await client.query<{ t: string | null }>(`SELECT to_regclass('example_credits') AS t`);
      assert.equal(example.rows[0]?.t, null, "the example's tables are not created for another module");
    } finally {
      await client.end();
    }
  });

  it("names SBINBOX_HANDLERS when the module cannot be loaded or is not a handler module", async function () {
    const err: string[] = [];
    const env = { SBINBOX_POSTGRES_URL: "postgres://127.0.0.1:1/x" };
    const code = await run(
      [],
      { ...env, SBINBOX_HANDLERS: "./no/such/module.js" },
      () => undefined,
      (l) => err.push(l),
    );
    assert.equal(code, 2);
    assert.match(err[0] ?? "", /SBINBOX_HANDLERS: cannot load "\.\/no\/such\/module\.js"/);
    // A module that loads but exports something else (here the package's own zod) is refused by shape.
    assert.equal(
      await run(
        [],
        { ...env, SBINBOX_HANDLERS: "zod" },
        () => undefined,
        (l) => err.push(l),
      ),
      2,
    );
    assert.match(err[1] ?? "", /SBINBOX_HANDLERS: "zod" has no valid name/);
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
