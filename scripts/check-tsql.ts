// `npm run check:tsql`: parses every T-SQL statement the SQL Server adapter can send (every string constant in
// src/inbox/sqlserver/statements.ts and src/outbox/sqlserver/statements.ts), the handlers' statements (every
// `{ sqlserver }` any module in handlers/ exports: scripts/tsql-handlers.ts), the
// database-user batch and every SQL Server migration (inbox, outbox, example, and every module's under handlers/,
// nested ones too: scripts/tsql-handlers.ts) with Microsoft's own parser
// (ScriptDom, run by tools/tsql-parse). Fails on any syntax error. Builds the tool on first use; later runs reuse
// the build.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const toolDir = join(root, "tools", "tsql-parse");
const toolOut = join(toolDir, "bin", "out");
const toolBinary = join(toolOut, "tsql-parse");
const migrationsDir = join(root, "src", "inbox", "sqlserver", "migrations");
// The team's module: handlers/, or the folder `--handlers <dir>` names (the check's own test gives one).
const handlersFlag = process.argv.indexOf("--handlers");
const handlersDir = handlersFlag > 0 ? resolve(process.argv[handlersFlag + 1] ?? "") : join(root, "handlers");
const migrationsDirs = [
  migrationsDir,
  join(root, "src", "outbox", "sqlserver", "migrations"),
  join(root, "src", "example", "migrations", "sqlserver"),
];

interface Item {
  name: string;
  sql: string;
}

/** Every string reachable from the module's exports, named by its export path. */
function collect(value: unknown, name: string, out: Item[]): void {
  if (typeof value === "string") out.push({ name, sql: value });
  else if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) collect(v, `${name}.${k}`, out);
  }
}

function newestSource(): number {
  return Math.max(...["Program.cs", "tsql-parse.csproj"].map((f) => statSync(join(toolDir, f)).mtimeMs));
}

function ensureTool(): void {
  if (existsSync(toolBinary) && statSync(toolBinary).mtimeMs >= newestSource()) return;
  process.stderr.write("check:tsql: building tools/tsql-parse (dotnet build)\n");
  const build = spawnSync(
    "dotnet",
    ["build", toolDir, "-c", "Release", "-o", toolOut, "--nologo", "-v", "quiet"],
    {
      stdio: "inherit",
      env: { ...process.env, DOTNET_CLI_TELEMETRY_OPTOUT: "1", DOTNET_NOLOGO: "1" },
    },
  );
  if (build.error || build.status !== 0) {
    throw new Error(
      `dotnet build of tools/tsql-parse failed (${build.error?.message ?? `exit ${build.status}`})`,
    );
  }
}

function parse(items: Item[]): { status: number | null; output: string } {
  const run = spawnSync(toolBinary, [], { input: JSON.stringify(items), encoding: "utf8" });
  if (run.error) throw run.error;
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

async function main(): Promise<number> {
  ensureTool();
  // A statement that is certainly wrong must be refused, or the check proves nothing.
  const canary = parse([{ name: "canary", sql: "DELETE TOP (@p1) FROM dbo.Inbox WHERE" }]);
  if (canary.status === 0) throw new Error("tsql-parse accepted invalid T-SQL; the check is broken");

  const items: Item[] = [];
  const statements = (await import("../src/inbox/sqlserver/statements.ts")) as Record<string, unknown>;
  for (const [name, value] of Object.entries(statements)) collect(value, `statements.ts:${name}`, items);
  const outbox = (await import("../src/outbox/sqlserver/statements.ts")) as Record<string, unknown>;
  for (const [name, value] of Object.entries(outbox)) collect(value, `outbox/statements.ts:${name}`, items);
  // The inbox's migrations, the outbox's and the example module's; the team's modules' come below.
  for (const dir of migrationsDirs) {
    for (const file of readdirSync(dir)
      .filter((f) => f.endsWith(".sql"))
      .sort()) {
      items.push({ name: `${relative(root, dir)}/${file}`, sql: readFileSync(join(dir, file), "utf8") });
    }
  }
  // The same statements and migrations for an inbox in another schema (SBINBOX_INBOX_SCHEMA), as sent then.
  const other = statements["sqlServerSql"] as (schema: string) => Record<string, unknown>;
  const inSchema = other("sbinbox_check");
  for (const [name, value] of Object.entries(inSchema))
    collect(value, `sqlServerSql("sbinbox_check"):${name}`, items);
  const move = inSchema["migrationInSchema"] as (sql: string) => string;
  for (const file of readdirSync(migrationsDir)
    .filter((f) => f.endsWith(".sql"))
    .sort()) {
    const moved = move(readFileSync(join(migrationsDir, file), "utf8"));
    if (/\bdbo\./.test(moved))
      throw new Error(`migrations/${file}: dbo. left after moving it to another schema`);
    items.push({ name: `migrations/${file} in schema sbinbox_check`, sql: moved });
  }
  // The conformance suite's own T-SQL, which runs only where a SQL Server is given (SBINBOX_TEST_MSSQL).
  const { sqlServerSql: conformanceSql } = await import("../test/conformance/backends.ts");
  const conformance: Record<string, string | undefined> = { ...conformanceSql("sbinbox_check") };
  for (const [name, sql] of Object.entries(conformance))
    if (sql !== undefined) items.push({ name: `test/conformance/backends.ts:${name}`, sql });
  const { featureProbeSql } = await import("../test/conformance/server-features.ts");
  for (const [name, sql] of Object.entries(featureProbeSql("[sbinbox_check].FeatureProbe_1")))
    items.push({ name: `test/conformance/server-features.ts:${name}`, sql });
  // The handlers' statements are sent by the worker too (dialect SQL as data).
  const { accountSql } = await import("../src/example/accounts.ts");
  for (const [name, sql] of Object.entries(accountSql))
    items.push({ name: `example/accounts.ts:${name}`, sql: sql.sqlserver });
  // A statements handler's statements go out composed into one T-SQL batch (markers, statements renumbered,
  // the transaction control): the example's, as one message, a batch of three, a batch split in two, and the
  // handle's path.
  const { composedExampleSamples } = await import("./tsql-statements.ts");
  items.push(...composedExampleSamples());
  const { handlerMigrations, handlerStatements } = await import("./tsql-handlers.ts");
  items.push(...(await handlerStatements(handlersDir, root)));
  items.push(...(await handlerMigrations(handlersDir, root)));
  // `sbinbox migrate --app-user` builds its batch from a name and a client ID; one instance of it stands for all.
  const { appUserBatch } = await import("../src/inbox/sqlserver/app-user.ts");
  items.push({
    name: "inbox/sqlserver/app-user.ts:appUserBatch",
    sql: appUserBatch("id-sbinbox-worker-example", "01020304-0506-0708-090a-0b0c0d0e0f10"),
  });
  const result = parse(items);
  process.stdout.write(result.output);
  if (result.status !== 0) {
    process.stderr.write("check:tsql: T-SQL parse errors above\n");
    return 1;
  }
  return 0;
}

process.exitCode = await main();
