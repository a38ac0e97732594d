import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import pg from "pg";
import { createPostgresOutboxStore } from "../../src/outbox/postgres/store.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

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

/** The docs' cell: `type` not null (or null), then `, collation` when the column has one. */
function cell(type: string, nullable: boolean, collation: string | null | undefined): string {
  return `\`${type}\` ${nullable ? "null" : "not null"}${collation ? `, \`${collation}\`` : ""}`;
}

/** `"Name" type ...` or `[Name] type ...`: the name, and its type with its nullability and collation. */
function columnOf(definition: string): [string, string] | undefined {
  const m = /^\s*(?:"(\w+)"|\[(\w+)\]|(\w+))\s+(\w+(?:\([\w, ]+\))?)(.*)$/.exec(definition);
  if (!m || /^(CONSTRAINT|PRIMARY|INDEX)$/i.test(m[3] ?? "")) return undefined;
  const nullable = !/\bNOT NULL\b/i.test(m[5]!) && !/\bPRIMARY KEY\b/i.test(m[5]!);
  const collation = /\bCOLLATE\s+"?(\w+)"?/i.exec(m[5]!)?.[1];
  return [m[1] ?? m[2] ?? m[3]!, cell(m[4]!.toLowerCase(), nullable, collation)];
}

/**
 * Statements that change the outbox in a way this reader does not follow (ALTER COLUMN, DROP, RENAME, sp_rename):
 * a migration with one must come with a reader that understands it, not pass with the table read as before.
 */
function unreadChanges(sql: string): string[] {
  const patterns = [
    /\bALTER\s+TABLE\b[^;]*?\b(?:ALTER|DROP|RENAME)\b[^;]*/gi,
    /\bDROP\s+(?:TABLE|INDEX|COLUMN|CONSTRAINT)\b[^;]*/gi,
    /\bsp_rename\b[^;]*/gi,
    /\bALTER\s+INDEX\b[^;]*/gi,
  ];
  return [...new Set(patterns.flatMap((p) => [...sql.matchAll(p)].map((m) => m[0].trim())))];
}

function migrationsText(dialect: Dialect): string {
  return migrations(dialect)
    .map((m) => m.sql)
    .join("\n")
    .replace(/--[^\n]*/g, "");
}

/** The columns the migrations create (CREATE TABLE, then ALTER TABLE ... ADD), in order. */
function migratedColumns(dialect: Dialect): [string, string][] {
  const sql = migrationsText(dialect);
  const changes = unreadChanges(sql);
  assert.deepEqual(
    changes,
    [],
    `the ${dialect} outbox migrations change the table in a way this test cannot read`,
  );
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

describe("the outbox contract: a change the migrations' reader does not follow fails it", function () {
  for (const sql of [
    `ALTER TABLE "Outbox" ALTER COLUMN "Key" TYPE text;`,
    "ALTER TABLE dbo.Outbox ALTER COLUMN [Key] nvarchar(800) NOT NULL;",
    `ALTER TABLE "Outbox" DROP COLUMN "TraceState";`,
    "DROP INDEX IX_Outbox_SentUtc ON dbo.Outbox;",
    `ALTER TABLE "Outbox" RENAME COLUMN "Error" TO "Reason";`,
    "EXEC sp_rename 'dbo.Outbox.Error', 'Reason', 'COLUMN';",
  ])
    it(sql, function () {
      assert.ok(unreadChanges(sql).length > 0, "not seen");
    });

  it("the ADDs and CREATEs of the migrations there are", function () {
    for (const dialect of DIALECTS) assert.deepEqual(unreadChanges(migrationsText(dialect)), []);
  });
});

/** information_schema's type as the docs write it (`varchar(128)`, `timestamptz`, ...). */
function pgType(c: { data_type: string; character_maximum_length: number | null }): string {
  const short: Record<string, string> = {
    "character varying": "varchar",
    "timestamp with time zone": "timestamptz",
  };
  const type = short[c.data_type] ?? c.data_type;
  return c.character_maximum_length === null ? type : `${type}(${c.character_maximum_length})`;
}

describe("the outbox contract against a migrated PostgreSQL (embedded)", function () {
  this.timeout(60_000);
  let pool: pg.Pool;
  const documented = documentedColumns(contractSection());

  before(async function () {
    pool = new pg.Pool({ connectionString: await createTestDatabase("outbox_contract"), max: 1 });
    const store = createPostgresOutboxStore({ pool });
    await store.migrate();
  });
  after(async () => pool?.end());

  it("information_schema.columns: the docs' columns, in order, with type, nullability and collation", async function () {
    const { rows } = await pool.query<{
      column_name: string;
      data_type: string;
      character_maximum_length: number | null;
      is_nullable: string;
      collation_name: string | null;
    }>(
      `SELECT column_name, data_type, character_maximum_length, is_nullable, collation_name
         FROM information_schema.columns WHERE table_name = 'Outbox' ORDER BY ordinal_position`,
    );
    assert.ok(rows.length >= 17);
    assert.deepEqual(
      documented.map((c) => [c.name, c.postgres]),
      rows.map((r) => [r.column_name, cell(pgType(r), r.is_nullable === "YES", r.collation_name)]),
    );
  });

  it("pg_indexes: the docs' indexes and the primary key, no other", async function () {
    const { rows } = await pool.query<{ indexname: string }>(
      `SELECT indexname FROM pg_indexes WHERE tablename = 'Outbox' ORDER BY indexname`,
    );
    const line = /\*\*Indexes:\*\* ([\s\S]*?)\n\n/.exec(contractSection())?.[1] ?? "";
    const named = [...new Set([...line.matchAll(/`(IX_\w+)`/g)].map((m) => m[1]!))];
    assert.deepEqual(rows.map((r) => r.indexname).sort(), [...named, "Outbox_pkey"].sort());
  });
});
