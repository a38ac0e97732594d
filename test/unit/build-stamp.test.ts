import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import {
  BUILD_INPUTS,
  BUILD_OUTPUTS,
  buildInputsHash,
  stampPath,
  upToDate,
} from "../../scripts/build-stamp.ts";

/** One file for each input (a folder gets one inside it), laid out as the checkout is. */
const inputFiles = BUILD_INPUTS.map((input) => (input.includes(".") ? input : `${input}/a/file.ts`));

describe("npm run build: skipped when nothing it reads changed (scripts/build-stamp.ts)", function () {
  let root: string;
  const write = async (path: string, text: string): Promise<void> => {
    await mkdir(dirname(join(root, path)), { recursive: true });
    await writeFile(join(root, path), text);
  };

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), "sbinbox-build-stamp-"));
    for (const file of inputFiles) await write(file, `the first ${file}`);
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("the same inputs hash the same", () => {
    assert.equal(buildInputsHash(root), buildInputsHash(root));
    assert.match(buildInputsHash(root), /^[0-9a-f]{64}$/);
  });

  for (const file of inputFiles) {
    it(`an edit to ${file} changes the hash, and undoing it restores it`, async () => {
      const before = buildInputsHash(root);
      await write(file, `the second ${file}`);
      assert.notEqual(buildInputsHash(root), before);
      await write(file, `the first ${file}`);
      assert.equal(buildInputsHash(root), before);
    });
  }

  it("a file added, removed or renamed in a source folder changes the hash", async () => {
    const before = buildInputsHash(root);
    await write("src/new.ts", "export {};");
    const added = buildInputsHash(root);
    assert.notEqual(added, before);
    await rm(join(root, "src/new.ts"));
    assert.equal(buildInputsHash(root), before);
    await rm(join(root, "src/a/file.ts"));
    await write("src/a/renamed.ts", "the first src/a/file.ts");
    assert.notEqual(buildInputsHash(root), before, "same content under another name");
  });

  it("what the build writes and what npm installs are not inputs", async () => {
    const before = buildInputsHash(root);
    for (const output of BUILD_OUTPUTS) await write(`${output}/index.js`, "compiled");
    await write("node_modules/x/index.js", "installed");
    await write("packages/dev/node_modules/y/index.js", "installed");
    await write("bench/e2e.ts", "not read by the build");
    assert.equal(buildInputsHash(root), before);
  });

  it("up to date only with every output present and the stamp equal to the inputs' hash", async () => {
    const hash = buildInputsHash(root);
    assert.equal(upToDate(root, hash), false, "never built");
    for (const output of BUILD_OUTPUTS) await write(`${output}/index.js`, "compiled");
    assert.equal(upToDate(root, hash), false, "built, but no stamp");
    await write(stampPath(root).slice(root.length + 1), `${hash}\n`);
    assert.equal(upToDate(root, hash), true);
    await write("src/a/file.ts", "edited");
    assert.equal(upToDate(root, buildInputsHash(root)), false, "an input edited since");
    await write("src/a/file.ts", "the first src/a/file.ts");
    assert.equal(upToDate(root, buildInputsHash(root)), true);
    await rm(join(root, "packages/publisher/dist"), { recursive: true });
    assert.equal(upToDate(root, hash), false, "an output removed");
  });
});
