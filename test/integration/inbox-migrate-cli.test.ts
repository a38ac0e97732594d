import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import pg from "pg";
import { POSTGRES_MIGRATIONS_DIR } from "../../src/inbox/postgres/adapter.ts";
import { postgresSql } from "../../src/inbox/postgres/statements.ts";
import { loadHandlerModule, moduleMigrations } from "../../src/app/handler-module.ts";
import { run } from "../../src/cli/migrate.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const bin = fileURLToPath(new URL("../../bin/sbinbox.js", import.meta.url));

const MODULE = "./test/fixtures/memo-handlers/index.ts";

describe("sbinbox migrate", function () {
  it("applies pending migrations through the real command, then is a no-op", async function () {
    const url = await createTestDatabase("inbox_migrate_cli");
    const env = { ...process.env, SBINBOX_POSTGRES_URL: url, SBINBOX_SQLSERVER_CONNECTION_STRING: "" };
    const first = await promisify(execFile)(process.execPath, [bin, "migrate"], { env });
    // The inbox's migration, then the handler module's (the example's when SBINBOX_HANDLERS is unset).
    assert.match(first.stdout, /applied 0001_inbox, 0002_inbox_markers, example:0001_example_accounts\n/);
    const second = await promisify(execFile)(process.execPath, [bin, "migrate"], { env });
    assert.match(second.stdout, /up to date/);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "SbInboxSchemaVersion"`,
      );
      assert.equal(rows[0]?.n, 2);
      const modules = await client.query<{ Module: string; Version: number }>(
        `SELECT "Module", "Version" FROM "SbInboxModuleVersion"`,
      );
      assert.deepEqual(modules.rows, [{ Module: "example", Version: 1 }]);
    } finally {
      await client.end();
    }
  });

  it("refuses 0002 on an inbox in use (exit 76, nothing applied) unless told the old workers are stopped", async function () {
    const url = await createTestDatabase("inbox_migrate_cli_stop");
    const out: string[] = [];
    const err: string[] = [];
    const env = { SBINBOX_POSTGRES_URL: url, SBINBOX_HANDLERS: MODULE };
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      // Version 1, as the previous release's deployment left it.
      await client.query(postgresSql().CREATE_VERSION_TABLE);
      await client.query(await readFile(join(POSTGRES_MIGRATIONS_DIR, "0001_inbox.sql"), "utf8"));
      await client.query(postgresSql().RECORD_VERSION, [1, "0001_inbox"]);
      assert.equal(
        await run(
          [],
          env,
          (l) => out.push(l),
          (l) => err.push(l),
        ),
        76,
        err.join("\n"),
      );
      assert.match(err.join("\n"), /0002_inbox_markers cannot run beside the previous version's workers/);
      const versions = async () =>
        (await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM "SbInboxSchemaVersion"`)).rows[0]
          ?.n;
      assert.equal(await versions(), 1);
      assert.equal(
        await run(
          ["--workers-stopped"],
          env,
          (l) => out.push(l),
          (l) => err.push(l),
        ),
        0,
      );
      assert.match(out.join("\n"), /applied 0002_inbox_markers/);
      assert.equal(await versions(), 2);
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
      SBINBOX_HANDLERS: MODULE,
    };
    const cwd = fileURLToPath(new URL("../..", import.meta.url));
    const first = await promisify(execFile)(process.execPath, [bin, "migrate"], { env, cwd });
    // A fixture module, not handlers/ (the team's folder, which may hold no migrations): the inbox's, then each of
    // the module's files, in order.
    const team = await loadHandlerModule(MODULE);
    const files = (await moduleMigrations(team, "postgres")).migrations;
    assert.ok(files.length > 0, "the probe must see the module's migrations");
    const expected = ["0001_inbox", "0002_inbox_markers", ...files.map((m) => `${team.name}:${m.name}`)];
    assert.equal(first.stdout, `sbinbox migrate: applied ${expected.join(", ")}\n`);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const recorded = await client.query<{ Module: string; Version: number }>(
        `SELECT "Module", "Version" FROM "SbInboxModuleVersion" ORDER BY "Version"`,
      );
      assert.deepEqual(
        recorded.rows,
        files.map((m) => ({ Module: team.name, Version: m.version })),
      );
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

  it("--app-user: needs its client ID, a GUID, and SQL Server; each mistake named, nothing touched", async function () {
    const err: string[] = [];
    const pgEnv = { SBINBOX_POSTGRES_URL: "postgres://127.0.0.1:1/x" };
    const sqlEnv = { SBINBOX_SQLSERVER_CONNECTION_STRING: "Server=127.0.0.1,1;Database=x" };
    const attempt = (argv: string[], env: Record<string, string>) =>
      run(
        argv,
        env,
        () => undefined,
        (l) => err.push(l),
      );
    assert.equal(await attempt(["--app-user", "id-x"], sqlEnv), 2);
    assert.match(err.at(-1) ?? "", /--app-user, --app-client-id: give both or neither/);
    assert.equal(await attempt(["--app-user", "id-x", "--app-client-id", "nope"], sqlEnv), 2);
    assert.match(err.at(-1) ?? "", /--app-client-id "nope" is not a GUID/);
    assert.equal(
      await attempt(
        ["--app-user", "id]x", "--app-client-id", "01020304-0506-0708-090a-0b0c0d0e0f10"],
        sqlEnv,
      ),
      2,
    );
    assert.match(err.at(-1) ?? "", /--app-user "id\]x" is not a managed identity name/);
    assert.equal(
      await attempt(["--app-user", "id-x", "--app-client-id", "01020304-0506-0708-090a-0b0c0d0e0f10"], pgEnv),
      2,
    );
    assert.match(err.at(-1) ?? "", /--app-user: creates an Entra database user, so it needs SQL Server/);
    assert.equal(await attempt(["--force"], pgEnv), 2);
    assert.match(err.at(-1) ?? "", /--force: unknown option/);
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
