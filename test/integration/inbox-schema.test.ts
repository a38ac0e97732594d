import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import { loadConfig } from "../../src/config/index.ts";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import { postgresSql } from "../../src/inbox/postgres/statements.ts";
import { sqlServerSql } from "../../src/inbox/sqlserver/statements.ts";
import { SQLSERVER_MIGRATIONS_DIR } from "../../src/inbox/sqlserver/adapter.ts";
import { loadMigrations } from "../../src/inbox/migrations.ts";
import { postgresSchemaBackend, runSchemaName, sqlServerBackend } from "../conformance/backends.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const bin = fileURLToPath(new URL("../../bin/sbinbox.js", import.meta.url));

async function tablesBySchema(url: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ t: string }>(
      `SELECT table_schema || '.' || table_name AS t FROM information_schema.tables
       WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`,
    );
    return rows.map((r) => r.t);
  } finally {
    await client.end();
  }
}

describe("the inbox's schema (SBINBOX_INBOX_SCHEMA)", function () {
  it("sbinbox migrate creates the schema and puts every inbox table in it, none in public", async function () {
    const url = await createTestDatabase("inbox_schema_cli");
    const env = {
      ...process.env,
      SBINBOX_POSTGRES_URL: url,
      SBINBOX_SQLSERVER_CONNECTION_STRING: "",
      SBINBOX_INBOX_SCHEMA: "sales_inbox",
    };
    const first = await promisify(execFile)(process.execPath, [bin, "migrate"], { env });
    assert.match(first.stdout, /applied 0001_inbox, 0002_inbox_markers, example:0001_example_accounts/);
    // The inbox's tables in its schema; the handler module's business tables where its statements find them.
    assert.deepEqual(await tablesBySchema(url), [
      "public.example_accounts",
      "public.example_credits",
      "sales_inbox.Inbox",
      "sales_inbox.InboxConsumer",
      "sales_inbox.InboxMarkers",
      "sales_inbox.SbInboxModuleVersion",
      "sales_inbox.SbInboxSchemaVersion",
    ]);
    const again = await promisify(execFile)(process.execPath, [bin, "migrate"], { env });
    assert.match(again.stdout, /up to date/);
  });

  it("sbinbox migrate refuses a schema that is not a plain identifier, naming the setting", async function () {
    const env = {
      ...process.env,
      SBINBOX_POSTGRES_URL: "postgres://127.0.0.1:1/none",
      SBINBOX_SQLSERVER_CONNECTION_STRING: "",
      SBINBOX_INBOX_SCHEMA: 'x"; DROP TABLE y; --',
    };
    const failed = await promisify(execFile)(process.execPath, [bin, "migrate"], { env }).then(
      () => assert.fail("migrate accepted the schema"),
      (error: { code: number; stderr: string }) => error,
    );
    assert.equal(failed.code, 2);
    assert.match(failed.stderr, /SBINBOX_INBOX_SCHEMA: must be a plain identifier/);
  });

  it("two inboxes in two schemas of one database keep their markers apart", async function () {
    const url = await createTestDatabase("inbox_two_schemas");
    const a = createPostgresInboxStore({ url, schema: "inbox_a" });
    const b = createPostgresInboxStore({ url, schema: "inbox_b" });
    try {
      await a.migrate();
      await b.migrate();
      const key = { messageId: "m-1", consumer: "c" };
      assert.equal((await a.process(key, async () => {})).kind, "committed");
      assert.equal((await a.process(key, async () => {})).kind, "duplicate");
      // the same key is new to the other schema's inbox
      assert.equal((await b.process(key, async () => {})).kind, "committed");
      assert.ok(await a.isProcessed(key));
      assert.deepEqual(await tablesBySchema(url), [
        "inbox_a.Inbox",
        "inbox_a.InboxConsumer",
        "inbox_a.InboxMarkers",
        "inbox_a.SbInboxSchemaVersion",
        "inbox_b.Inbox",
        "inbox_b.InboxConsumer",
        "inbox_b.InboxMarkers",
        "inbox_b.SbInboxSchemaVersion",
      ]);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("the worker's config carries the schema, and leaves it to the dialect's default when unset", function () {
    const base = {
      SBINBOX_POSTGRES_URL: "postgres://h/db",
      SBINBOX_SERVICEBUS_CONNECTION_STRING: "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=v",
    };
    assert.equal(loadConfig({ env: { ...base, SBINBOX_INBOX_SCHEMA: "inbox" } }).inboxSchema, "inbox");
    assert.equal(loadConfig({ env: base }).inboxSchema, undefined);
    assert.match(postgresSql().statements.insertOpenClaim, /^INSERT INTO "public"\."Inbox"/);
    assert.match(sqlServerSql().statements.insertOpenClaim, /^INSERT INTO \[dbo\]\.Inbox/);
  });

  it("SQL Server: every statement and migration names the configured schema and no other", async function () {
    const sql = sqlServerSql("sales_inbox");
    const texts = [sql.CREATE_VERSION_TABLE, sql.SELECT_APPLIED_VERSIONS, sql.RECORD_VERSION];
    texts.push(...(Object.values(sql.statements) as string[]));
    for (const migration of await loadMigrations(SQLSERVER_MIGRATIONS_DIR))
      texts.push(sql.migrationInSchema(migration.sql));
    for (const text of texts) assert.doesNotMatch(text, /\bdbo\./, text);
    assert.ok(texts.filter((t) => t.includes("[sales_inbox].Inbox")).length >= 8);
    assert.throws(() => sqlServerSql("a]; DROP TABLE x; --"), /not a plain identifier/);
  });

  it("a schema-scoped conformance run drops its schema afterwards", async function () {
    const run = await postgresSchemaBackend.database("drop_check");
    const store = run.createStore();
    await store.migrate();
    await run.raw.query(run.sql.createEffects);
    const schema = run.schema!;
    const present = async () =>
      (
        await run.raw.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = $1", [
          schema,
        ])
      ).rows[0]?.n;
    assert.equal(await present(), 1);
    const other = await postgresSchemaBackend.database("drop_check_witness");
    try {
      await run.dispose();
      const gone = await other.raw.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = $1",
        [schema],
      );
      assert.equal(gone.rows[0]?.n, 0);
    } finally {
      await other.dispose();
    }
  });

  it("SBINBOX_TEST_MSSQL: a string naming a database runs in a schema there; without one, a database per file", function () {
    const azure = sqlServerBackend(
      "Server=tcp:dev.database.windows.net,1433;Initial Catalog=devdb;User Id=u;Password=p;Encrypt=true",
    );
    assert.match(azure.name, /a schema per run in database devdb/);
    const container = sqlServerBackend(
      "Server=localhost,1433;User Id=sa;Password=p;TrustServerCertificate=true",
    );
    assert.equal(container.name, "SQL Server (SBINBOX_TEST_MSSQL)");
    const master = sqlServerBackend("Server=localhost;Database=master;User Id=sa;Password=p");
    assert.equal(master.name, "SQL Server (SBINBOX_TEST_MSSQL)");
    const names = new Set(
      Array.from({ length: 20 }, () => runSchemaName("a label that is rather long, with punctuation!")),
    );
    assert.equal(names.size, 20);
    for (const name of names) assert.match(name, /^[a-z_][a-z0-9_]{0,62}$/);
  });
});
