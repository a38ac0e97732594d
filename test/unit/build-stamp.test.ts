import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, relative, sep } from "node:path";
import { promisify } from "node:util";
import {
  BUILD_INPUTS,
  BUILD_OUTPUTS,
  BUILD_PROJECTS,
  buildInputFiles,
  buildInputsHash,
  upToDate,
  writeStamp,
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
    writeStamp(root, hash);
    assert.equal(upToDate(root, hash), true);
    await write("src/a/file.ts", "edited");
    assert.equal(upToDate(root, buildInputsHash(root)), false, "an input edited since");
    await write("src/a/file.ts", "the first src/a/file.ts");
    assert.equal(upToDate(root, buildInputsHash(root)), true);
    await rm(join(root, "packages/publisher/dist"), { recursive: true });
    assert.equal(upToDate(root, hash), false, "an output removed");
  });

  describe("the outputs are the ones the build wrote", () => {
    let hash: string;
    const published = "packages/publisher/dist/publisher.js";
    beforeEach(async () => {
      for (const output of BUILD_OUTPUTS) await write(`${output}/index.js`, "compiled");
      await write(published, "export const publish = 1;\n");
      hash = buildInputsHash(root);
      writeStamp(root, hash);
      assert.equal(upToDate(root, hash), true);
    });

    it("an output rewritten by another command (a package's own build) is built again, sources unchanged", async () => {
      // The reviewer's case: a line added to the source, `npm run build -w packages/publisher`, the line removed.
      await write("packages/publisher/src/publisher.ts", "export const STALE_MARKER = 1;");
      await write(published, "export const publish = 1;\nexport const STALE_MARKER = 1;\n");
      await rm(join(root, "packages/publisher/src/publisher.ts"));
      assert.equal(buildInputsHash(root), hash, "the sources are as the build saw them");
      assert.equal(upToDate(root, hash), false, "the stale output is not trusted");
    });

    it("an output rewritten with content of the same size is built again", async () => {
      await write(published, "export const publish = 2;\n");
      assert.equal(upToDate(root, hash), false);
    });

    it("a file removed inside an output folder is built again", async () => {
      await rm(join(root, published));
      assert.equal(upToDate(root, hash), false);
    });

    it("a file added inside an output folder is built again", async () => {
      await write("dist/extra.js", "not written by the build");
      assert.equal(upToDate(root, hash), false);
    });
  });
});

const execFileAsync = promisify(execFile);

describe("npm run build: the inputs cover every file tsc reads (scripts/build-stamp.ts)", function () {
  // Five tsc processes listing their programs' files (no type check): a few seconds, more under load.
  this.timeout(120_000);
  const repo = join(import.meta.dirname, "..", "..");

  it("each build project's files outside node_modules are inputs, or outputs of an earlier build step", async () => {
    const workspaces = (
      JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as {
        workspaces: string[];
      }
    ).workspaces;
    assert.deepEqual(workspaces, ["packages/*"], "the projects below follow the workspaces");
    // Each workspace's `build` script compiles its tsconfig.json; scripts/build.ts then runs BUILD_PROJECTS.
    const projects = ["packages/dev/tsconfig.json", "packages/publisher/tsconfig.json", ...BUILD_PROJECTS];
    for (const project of projects.slice(0, 2))
      assert.match(
        readFileSync(join(repo, dirname(project), "package.json"), "utf8"),
        /"build": "[^"]*tsc -p tsconfig\.json/,
        `${project} is what its package's build compiles`,
      );
    const tsc = join(repo, "node_modules", "typescript", "bin", "tsc");
    const listed = await Promise.all(
      projects.map(async (project) => {
        const { stdout } = await execFileAsync(process.execPath, [tsc, "-p", project, "--listFilesOnly"], {
          cwd: repo,
          maxBuffer: 64 * 1024 * 1024,
        });
        return { project, files: stdout.split("\n").filter((line) => line.trim() !== "") };
      }),
    );
    const inputs = new Set(buildInputFiles(repo));
    const outputs = BUILD_OUTPUTS.map((output) => `${output}/`);
    for (const { project, files } of listed) {
      const ours = files
        .map((file) => relative(repo, file).split(sep).join("/"))
        .filter((file) => !file.split("/").includes("node_modules"));
      assert.ok(ours.length > 0, `${project} lists files of the repository`);
      const missing = ours.filter(
        (file) => !inputs.has(file) && !outputs.some((output) => file.startsWith(output)),
      );
      assert.deepEqual(missing, [], `${project} reads files the build's hash does not cover`);
    }
  });
});
