/**
 * `npm run check:tsql` parses every statement a team's handler module exports, wherever it puts them: before, only
 * handlers/statements.ts's `notesSql` was read, so a new handler's statement with a reserved word (LineNo) passed.
 * And every module's SQL Server migrations, nested ones too: before, only handlers/migrations/sqlserver/ was read,
 * so `CREATE TABL` in handlers/orders/migrations/sqlserver/ passed. Nothing here reads the notes example, which is
 * the team's to replace.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { handlerMigrations, handlerStatements } from "../../scripts/tsql-handlers.ts";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));

describe("check:tsql reads the handler module's statements", function () {
  this.timeout(120_000);
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-tsql-"));
    await mkdir(join(dir, "migrations", "sqlserver"), { recursive: true });
    await mkdir(join(dir, "orders"));
    // A second handler's statements in a file of its own, nested, beside a module export naming its folders.
    await writeFile(
      join(dir, "orders", "sql.ts"),
      `export const orderSql = {
  lines: {
    insert: {
      postgres: "INSERT INTO order_lines (order_id, line_no) VALUES ($1, $2)",
      sqlserver: "INSERT INTO dbo.OrderLines (OrderId, LineNo) VALUES (@p1, @p2);",
    },
  },
};
export const fine = { postgres: "SELECT 1", sqlserver: "SELECT 1 AS one;" };
`,
    );
    await writeFile(
      join(dir, "index.ts"),
      `export default { name: "orders", handlers: () => [], migrations: { postgres: "/x/postgres/", sqlserver: "/x/sqlserver/" } };\n`,
    );
    await writeFile(join(dir, "orders", "sql.test.ts"), `throw new Error("a test file is not imported");\n`);
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("finds every { sqlserver } any module exports, and not the module's migration folders", async () => {
    const found = await handlerStatements(dir, dir);
    assert.deepEqual(
      found.map((s) => s.name),
      ["orders/sql.ts:fine.sqlserver", "orders/sql.ts:orderSql.lines.insert.sqlserver"],
    );
  });

  it("fails on a reserved word in a new handler's statement, naming it", async () => {
    const failed = await run(process.execPath, ["scripts/check-tsql.ts", "--handlers", dir], {
      cwd: root,
    }).then(
      () => assert.fail("check:tsql passed a statement with a reserved word"),
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    assert.equal(failed.code, 1);
    assert.match(failed.stdout, /orders\/sql\.ts:orderSql\.lines\.insert\.sqlserver: .*LineNo/);
    assert.match(failed.stdout, /1 with errors/);
  });

  it("passes the handlers/ folder as it is, whatever module the team keeps there", async () => {
    const passed = await run(process.execPath, ["scripts/check-tsql.ts"], { cwd: root });
    assert.match(passed.stdout, /, 0 with errors/);
  });
});

describe("check:tsql reads every module's SQL Server migrations, nested ones too", function () {
  this.timeout(120_000);
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-tsql-migrations-"));
    // handlers/ holding two modules: the orders one nested, with its own migration folders, and one at the top.
    for (const sub of ["migrations/sqlserver", "orders/migrations/sqlserver", "orders/migrations/postgres"])
      await mkdir(join(dir, sub), { recursive: true });
    await writeFile(
      join(dir, "migrations/sqlserver/0001_top.sql"),
      "CREATE TABLE dbo.Top1 (Id int PRIMARY KEY);\n",
    );
    await writeFile(
      join(dir, "orders/migrations/postgres/0001_orders.sql"),
      "CREATE TABL orders (id int);\n",
    );
    await writeFile(
      join(dir, "orders/migrations/sqlserver/0001_orders.sql"),
      "CREATE TABL dbo.Orders (Id int PRIMARY KEY);\n",
    );
    await writeFile(
      join(dir, "orders/index.ts"),
      `const folder = (d: string) => new URL(\`./migrations/\${d}/\`, import.meta.url).pathname;
export default { name: "orders", handlers: () => [], migrations: { postgres: folder("postgres"), sqlserver: folder("sqlserver") } };
`,
    );
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("lists the top folder's and the nested module's SQL Server migrations, not the PostgreSQL ones", async () => {
    const found = await handlerMigrations(dir, dir);
    assert.deepEqual(
      found.map((s) => s.name),
      ["migrations/sqlserver/0001_top.sql", "orders/migrations/sqlserver/0001_orders.sql"],
    );
  });

  it("fails on the nested module's broken migration, naming its file", async () => {
    const failed = await run(process.execPath, ["scripts/check-tsql.ts", "--handlers", dir], {
      cwd: root,
    }).then(
      () => assert.fail("check:tsql passed CREATE TABL in a nested module's migration"),
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    assert.equal(failed.code, 1);
    assert.match(failed.stdout, /orders\/migrations\/sqlserver\/0001_orders\.sql: /);
    assert.doesNotMatch(failed.stdout, /0001_top\.sql: /);
    assert.match(failed.stdout, /1 with errors/);
  });
});
