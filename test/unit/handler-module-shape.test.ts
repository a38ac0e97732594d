// A module's optional stop must be a function: anything else is a configuration error named at load.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadHandlerModule } from "../../src/app/handler-module.ts";

describe("loadHandlerModule and a module's stop", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-module-shape-"));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("takes a module whose stop is a function, and refuses one whose stop is not", async () => {
    const good = join(dir, "good.mjs");
    await writeFile(good, `export default { name: "good", handlers: () => [], stop: async () => {} };\n`);
    assert.equal(typeof (await loadHandlerModule(good)).stop, "function");
    const bad = join(dir, "bad.mjs");
    await writeFile(bad, `export default { name: "bad", handlers: () => [], stop: "pool.end" };\n`);
    await assert.rejects(loadHandlerModule(bad), /has a stop that is not a function/);
  });
});
