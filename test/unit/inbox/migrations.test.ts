import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadMigrations } from "../../../src/inbox/migrations.ts";
import { POSTGRES_MIGRATIONS_DIR } from "../../../src/inbox/postgres/adapter.ts";
import { SQLSERVER_MIGRATIONS_DIR } from "../../../src/inbox/sqlserver/adapter.ts";

describe("inbox migration files", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-mig-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("both dialects have the same numbered migrations, each creating the inbox's unique index", async () => {
    const pg = await loadMigrations(POSTGRES_MIGRATIONS_DIR);
    const ms = await loadMigrations(SQLSERVER_MIGRATIONS_DIR);
    assert.deepEqual(
      pg.map((m) => m.name),
      ms.map((m) => m.name),
    );
    assert.equal(pg[0]?.name, "0001_inbox");
    assert.match(pg[0]?.sql ?? "", /CREATE UNIQUE INDEX "IX_Inbox_MessageId_Consumer"/);
    assert.match(ms[0]?.sql ?? "", /CREATE UNIQUE NONCLUSTERED INDEX IX_Inbox_MessageId_Consumer/);
    assert.doesNotMatch(ms[0]?.sql ?? "", /^\s*GO\s*$/im, "one batch: the runner sends the file as it is");
    // 0002 renames that table InboxLegacy and creates the smaller one, its unique index on the key columns.
    assert.equal(pg[1]?.name, "0002_inbox_markers");
    assert.match(
      pg[1]?.sql ?? "",
      /CREATE UNIQUE INDEX "IX_Inbox_MessageKey_ConsumerId" ON "Inbox" \("MessageKey", "ConsumerId"\)/,
    );
    assert.match(
      ms[1]?.sql ?? "",
      /CREATE UNIQUE NONCLUSTERED INDEX IX_Inbox_MessageKey_ConsumerId ON dbo\.Inbox \(MessageKey, ConsumerId\)/,
    );
    assert.doesNotMatch(ms[1]?.sql ?? "", /^\s*GO\s*$/im, "one batch: the runner sends the file as it is");
  });

  it("loads in order and refuses gaps and badly named files", async () => {
    await writeFile(join(dir, "0002_b.sql"), "select 2");
    await writeFile(join(dir, "0001_a.sql"), "select 1");
    assert.deepEqual(
      (await loadMigrations(dir)).map((m) => m.version),
      [1, 2],
    );
    await writeFile(join(dir, "0004_d.sql"), "select 4");
    await assert.rejects(loadMigrations(dir), /0004_\w+\.sql leaves a gap \(expected 0003_name\.sql next\)/);
    await rm(join(dir, "0004_d.sql"));
    await writeFile(join(dir, "0002_bb.sql"), "select 2");
    await assert.rejects(
      loadMigrations(dir),
      /0002_bb\.sql repeats number 0002, already used by 0002_b\.sql \(renumber it 0003_name\.sql\)/,
    );
    await rm(join(dir, "0002_bb.sql"));
    await writeFile(join(dir, "3_c.sql"), "select 3");
    await assert.rejects(loadMigrations(dir), /not named NNNN_name.sql/);
  });
});
