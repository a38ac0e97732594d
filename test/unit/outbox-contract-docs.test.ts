import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";

// The outbox table is an interface other languages write to (publishers/dotnet, publishers/python): docs/outbox.md's
// "The contract for other languages" must say what the migrations make of it, column by column.
const root = new URL("../../", import.meta.url);
const DIALECTS = ["postgres", "sqlserver"] as const;
type Dialect = (typeof DIALECTS)[number];

interface Column {
  readonly name: string;
  /** `type` plus "not null" or "null", as the docs' table writes it. */
  readonly postgres?: string;
  readonly sqlserver?: string;
}

function migrations(dialect: Dialect): { name: string; sql: string }[] {
  const dir = new URL(`src/outbox/${dialect}/migrations/`, root);
  return readdirSync(dir)
    .filter((f) => f.endsWith(".sql"))
    .sort()
    .map((f) => ({ name: f.replace(/\.sql$/, ""), sql: readFileSync(new URL(f, dir), "utf8") }));
}

/** `"Name" type ...` or `[Name] type ...`: the name, and its type with its nullability. */
function columnOf(definition: string): [string, string] | undefined {
  const m = /^\s*(?:"(\w+)"|\[(\w+)\]|(\w+))\s+(\w+(?:\([\w, ]+\))?)(.*)$/.exec(definition);
  if (!m || /^(CONSTRAINT|PRIMARY|INDEX)$/i.test(m[3] ?? "")) return undefined;
  const nullable = !/\bNOT NULL\b/i.test(m[5]!) && !/\bPRIMARY KEY\b/i.test(m[5]!);
  return [m[1] ?? m[2] ?? m[3]!, `\`${m[4]!.toLowerCase()}\` ${nullable ? "null" : "not null"}`];
}

/** The columns the migrations create (CREATE TABLE, then ALTER TABLE ... ADD), in order. */
function migratedColumns(dialect: Dialect): [string, string][] {
  const sql = migrations(dialect)
    .map((m) => m.sql)
    .join("\n")
    .replace(/--[^\n]*/g, "");
  const columns: [string, string][] = [];
  const table = /CREATE TABLE [^(]*\(([\s\S]*?)\n\);/.exec(sql);
  assert.ok(table, `no CREATE TABLE in the ${dialect} outbox migrations`);
  for (const line of table[1]!.split(",\n")) {
    const column = columnOf(line);
    if (column) columns.push(column);
  }
  for (const m of sql.matchAll(/ALTER TABLE \S+ ADD (?:COLUMN )?([^;]+);/gi)) {
    const column = columnOf(m[1]!);
    if (column) columns.push(column);
  }
  return columns;
}

function migratedIndexes(): string[] {
  const names = DIALECTS.flatMap((d) =>
    migrations(d).flatMap((m) =>
      [...m.sql.matchAll(/CREATE (?:NONCLUSTERED )?INDEX "?(\w+)"?/g)].map((x) => x[1]!),
    ),
  );
  return [...new Set(names)].sort();
}

function contractSection(): string {
  const doc = readFileSync(new URL("docs/outbox.md", root), "utf8");
  const start = doc.indexOf("## The contract for other languages");
  assert.ok(start >= 0, 'docs/outbox.md has no "## The contract for other languages" section');
  const end = doc.indexOf("\n## ", start + 1);
  return doc.slice(start, end < 0 ? undefined : end);
}

function documentedColumns(section: string): Column[] {
  return section
    .split("\n")
    .filter((l) => /^\| `\w+` \|/.test(l))
    .map((l) => {
      const cells = l.split("|").map((c) => c.trim());
      return { name: cells[1]!.replaceAll("`", ""), postgres: cells[2], sqlserver: cells[3] };
    });
}

describe("the outbox contract in docs/outbox.md matches the outbox's migrations", function () {
  const section = contractSection();
  const documented = documentedColumns(section);

  for (const dialect of DIALECTS) {
    it(`${dialect}: every column, in order, with its type and nullability`, function () {
      const migrated = migratedColumns(dialect);
      assert.ok(migrated.length >= 17, `only ${migrated.length} columns read from the ${dialect} migrations`);
      assert.deepEqual(
        documented.map((c) => [c.name, c[dialect]]),
        migrated,
        `docs/outbox.md's contract table differs from src/outbox/${dialect}/migrations/: update the docs with the table`,
      );
    });

    it(`${dialect}: the migrations the docs name are the ones there are`, function () {
      const line = /\*\*Migrations:\*\* ([^(]+)/.exec(section)?.[1] ?? "";
      const named = [...line.matchAll(/`(\w+)`/g)].map((m) => m[1]);
      assert.deepEqual(
        named,
        migrations(dialect).map((m) => m.name),
      );
    });
  }

  it("every index the migrations create is named, and no other", function () {
    const line = /\*\*Indexes:\*\* ([\s\S]*?)\n\n/.exec(section)?.[1] ?? "";
    const named = [...new Set([...line.matchAll(/`(IX_\w+)`/g)].map((m) => m[1]))].sort();
    assert.deepEqual(named, migratedIndexes());
  });
});
