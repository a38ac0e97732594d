/**
 * `node scripts/stage-worker.ts <stage folder>`: the worker's deployment package from the worker package as
 * published. The root package is packed (`npm pack`, its `files`: bin/ and the compiled dist/, no sources), its
 * tarball unpacked into the stage, the team's compiled handlers (dist-handlers/, not part of the published package)
 * added, and its production dependencies installed at this repository's locked versions: no development
 * dependency, no sbinbox-dev (an optional peer), no install scripts. Run after `npm run build`;
 * scripts/package-worker.sh is the one caller.
 */
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { installProduction, repoRoot } from "./packages.ts";

const exec = promisify(execFile);
const stage = process.argv[2];
if (!stage) throw new Error("usage: node scripts/stage-worker.ts <stage folder>");

const packDir = mkdtempSync(join(tmpdir(), "sbinbox-stage-"));
try {
  const { stdout } = await exec(
    "npm",
    ["pack", "--ignore-scripts", "--json", "--loglevel=error", "--pack-destination", packDir],
    { cwd: repoRoot },
  );
  const [packed] = JSON.parse(stdout) as { filename: string }[];
  await exec("tar", ["-xzf", join(packDir, packed!.filename), "-C", stage, "--strip-components=1"]);
} finally {
  rmSync(packDir, { recursive: true, force: true });
}
cpSync(join(repoRoot, "dist-handlers"), join(stage, "dist-handlers"), { recursive: true });
// The published manifest, less what only a checkout uses: its workspaces (the other packages' folders are not
// here), its development dependencies and scripts.
const manifest = JSON.parse(readFileSync(join(stage, "package.json"), "utf8")) as Record<string, unknown>;
for (const key of ["workspaces", "devDependencies", "scripts"]) delete manifest[key];
// Offline when the cache has every tarball (it does after `npm ci`), else from the registry.
await installProduction(stage, manifest, ["--prefer-offline", "--omit=optional", "--omit=peer"]);
