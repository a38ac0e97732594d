/**
 * `npm run check:tsql` parses every statement a team's handler module exports, wherever it puts them: before, only
 * handlers/statements.ts's `notesSql` was read, so a new handler's statement with a reserved word (LineNo) passed.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { handlerStatements } from "../../scripts/tsql-handlers.ts";

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

  it("passes the project's own handlers/", async () => {
    const own = await handlerStatements(join(root, "handlers"), root);
    assert.ok(own.some((s) => s.name === "handlers/statements.ts:notesSql.insertNote.sqlserver"));
    const passed = await run(process.execPath, ["scripts/check-tsql.ts"], { cwd: root });
    assert.match(passed.stdout, /, 0 with errors/);
  });
});
