/**
 * handlers/ is the team's to replace: in a copy of the repository whose handlers/ holds another module (an orders
 * module of a team's, test/fixtures/orders-handlers, its migrations nested in orders/) and nothing of the notes, the
 * suites that once read the notes example run green, and so does the team's own test beside its module. The copy is
 * cheap: the files those suites read, with node_modules and tools/ (the built T-SQL parser) linked, not copied.
 *
 * test/deploy/appservice-start.test.ts, the third suite that read the notes, is not run here: it builds and packs
 * the worker (minutes), and it now runs a fixture module in the place of the shipped one, checking the shipped
 * dist-handlers/ against whatever handlers/ holds.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cp, mkdtemp, readdir, rename, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { cleanEnv } from "../helpers/cli.ts";
import { SHARED_POSTGRES_ENV } from "../helpers/postgres.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const COPIED = [
  ".mocharc.cjs",
  "package.json",
  "tsconfig.json",
  "index.js",
  "README.md",
  "bin",
  "docs",
  "scripts",
  "src",
  "test",
];
const LINKED = ["node_modules", "tools"];
// The suites that read handlers/ before (the notes' table, their statement's export path, handlers/index.ts), and
// the team's own test.
const SUITES = [
  "test/deploy/first-message.test.ts",
  "test/unit/check-tsql-handlers.test.ts",
  "test/integration/newcomer-mistakes.test.ts",
  "handlers/orders.test.ts",
];

describe("handlers/ replaced by a team's module, in a copy of the repository", function () {
  this.timeout(300_000);
  let copy: string;
  before(async () => {
    copy = await mkdtemp(join(tmpdir(), "sbinbox-replaced-"));
    for (const name of COPIED) await cp(join(root, name), join(copy, name), { recursive: true });
    for (const name of LINKED) await symlink(join(root, name), join(copy, name));
    await cp(join(root, "test/fixtures/orders-handlers"), join(copy, "handlers"), { recursive: true });
    await rename(join(copy, "handlers/orders-test.ts"), join(copy, "handlers/orders.test.ts"));
  });
  after(async () => {
    if (copy) await rm(copy, { recursive: true, force: true });
  });

  it("holds no trace of the notes in handlers/", async () => {
    const files = (await readdir(join(copy, "handlers"), { recursive: true })).sort();
    assert.ok(files.includes("orders/migrations/sqlserver/0001_orders.sql"), files.join(", "));
    assert.deepEqual(
      files.filter((f) => /note/i.test(f)),
      [],
    );
  });

  it("runs the suites that once read the notes, and the team's test, green", async () => {
    const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        // Two at a time: this runs inside the project's own parallel run.
        [join(copy, "node_modules/mocha/bin/mocha.js"), "--jobs", "2", ...SUITES],
        {
          cwd: copy,
          // The run's shared PostgreSQL, so the copy's suites start none of their own.
          env: cleanEnv({ [SHARED_POSTGRES_ENV]: process.env[SHARED_POSTGRES_ENV] ?? "" }),
          maxBuffer: 16 * 1024 * 1024,
        },
        (error, stdout, stderr) =>
          resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
    const summary = /^(\d+) passed, (\d+) failed$/m.exec(run.stdout);
    assert.equal(run.code, 0, `${run.stdout.slice(-4000)}\n${run.stderr.slice(-2000)}`);
    assert.ok(summary, run.stdout.slice(-2000));
    assert.equal(summary[2], "0");
    // 2 first-message, 5 check:tsql, 5 newcomer mistakes, 1 of the team's.
    assert.equal(summary[1], "13", run.stdout.slice(-4000));
  });
});
