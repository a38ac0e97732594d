/**
 * The mistakes a team makes writing its first handler module, each met with one named line that says what is
 * wrong and where, no stack trace: a configuration error exits 2 before the worker starts anything (PostgreSQL,
 * the broker), a path written without ./ gets a hint, a migration that fails or is misnumbered is named with its
 * file and module, and a module whose two dialects' folders differ is warned about.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCli } from "../helpers/cli.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const STACK = /^\s+at /m;

/** A module with these migration files per dialect, in a folder of its own. */
async function moduleWith(dir: string, files: Record<"postgres" | "sqlserver", Record<string, string>>) {
  for (const [dialect, byName] of Object.entries(files)) {
    await mkdir(join(dir, "migrations", dialect), { recursive: true });
    for (const [name, sql] of Object.entries(byName))
      await writeFile(join(dir, "migrations", dialect, name), sql);
  }
  await writeFile(
    join(dir, "index.mjs"),
    `import { fileURLToPath } from "node:url";
const folder = (d) => fileURLToPath(new URL("./migrations/" + d + "/", import.meta.url));
export default { name: "orders", handlers: () => [], migrations: { postgres: folder("postgres"), sqlserver: folder("sqlserver") } };
`,
  );
  return join(dir, "index.mjs");
}

describe("a newcomer's mistakes with the handler module", function () {
  this.timeout(60_000);
  let work: string;
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "sbinbox-newcomer-"));
  });
  after(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  it("a module that cannot be loaded: exit 2, named, before PostgreSQL and the broker start", async () => {
    const result = await runCli(["worker"], { SBINBOX_HANDLERS: "./handlers/nope.ts", PORT: "0" });
    assert.equal(result.code, 2, result.stderr);
    assert.match(
      result.stderr,
      /sbinbox worker: configuration error: SBINBOX_HANDLERS: cannot load "\.\/handlers\/nope\.ts"/,
    );
    assert.doesNotMatch(result.stderr, /embedded defaults: local broker and embedded PostgreSQL started/);
    assert.doesNotMatch(
      result.stderr,
      /http listening/,
      "the HTTP listener starts only after the module loads",
    );
    assert.doesNotMatch(result.stderr, STACK);
  });

  it("a path without ./ is taken for a package; the error says which file was meant", async () => {
    // Any module's file: handlers/ is the team's and may hold anything.
    const file = "test/fixtures/memo-handlers/index.ts";
    const result = await runCli(["worker"], { SBINBOX_HANDLERS: file, PORT: "0" });
    assert.equal(result.code, 2, result.stderr);
    assert.ok(
      result.stderr.includes(`a file path starts with ./ or /: did you mean "./${file}"?`),
      result.stderr,
    );
    assert.doesNotMatch(result.stderr, STACK);
  });

  it("a migration with a syntax error: exit 1 naming the file and the module, nothing applied", async () => {
    const module = await moduleWith(join(work, "syntax"), {
      postgres: { "0001_orders.sql": "CREATE TABLE orders (id bigint PRIMARY KEY,);" },
      sqlserver: { "0001_orders.sql": "CREATE TABLE dbo.Orders (Id bigint PRIMARY KEY);" },
    });
    const url = await createTestDatabase("newcomer_syntax");
    const result = await runCli(["migrate"], { SBINBOX_POSTGRES_URL: url, SBINBOX_HANDLERS: module });
    assert.equal(result.code, 1, result.stderr);
    assert.match(
      result.stderr,
      /sbinbox migrate: module "orders"'s migration \S+syntax\/migrations\/postgres\/0001_orders\.sql failed, nothing of this run was applied: syntax error at or near "\)"/,
    );
    assert.doesNotMatch(result.stderr, STACK);
    const again = await runCli(["migrate"], {
      SBINBOX_POSTGRES_URL: url,
      SBINBOX_HANDLERS: "./test/fixtures/memo-handlers/index.ts",
    });
    assert.match(
      again.stdout,
      /applied 0001_inbox/,
      "the failed run left the inbox's migration unapplied too",
    );
  });

  it("misnumbered files: exit 2 naming the file", async () => {
    const module = await moduleWith(join(work, "numbers"), {
      postgres: { "0001_orders.sql": "SELECT 1", "0003_lines.sql": "SELECT 3" },
      sqlserver: { "0001_orders.sql": "SELECT 1", "0003_lines.sql": "SELECT 3" },
    });
    const url = await createTestDatabase("newcomer_numbers");
    const result = await runCli(["migrate"], { SBINBOX_POSTGRES_URL: url, SBINBOX_HANDLERS: module });
    assert.equal(result.code, 2, result.stderr);
    assert.match(
      result.stderr,
      /migration \S+\/0003_lines\.sql leaves a gap \(expected 0002_name\.sql next\)/,
    );
    assert.doesNotMatch(result.stderr, STACK);
  });

  it("the two dialects' folders differ: migrated, with a warning naming the files", async () => {
    const module = await moduleWith(join(work, "dialects"), {
      postgres: {
        "0001_orders.sql": "CREATE TABLE orders (id bigint)",
        "0002_lines.sql": "CREATE TABLE lines (id bigint)",
      },
      sqlserver: { "0001_orders.sql": "CREATE TABLE dbo.Orders (Id bigint);" },
    });
    const url = await createTestDatabase("newcomer_dialects");
    const result = await runCli(["migrate"], { SBINBOX_POSTGRES_URL: url, SBINBOX_HANDLERS: module });
    assert.equal(result.code, 0, result.stderr);
    assert.match(
      result.stdout,
      /applied 0001_inbox, 0002_inbox_markers, orders:0001_orders, orders:0002_lines/,
    );
    assert.match(
      result.stderr,
      /warning: handler module "orders": its migration folders differ between dialects: postgres has 0002_lines, which sqlserver has not/,
    );
  });
});
