// `npm run build`: the packages' builds, sbinbox's, the harness's and the handlers', then the assets they read at
// run time; skipped when nothing it reads changed and nothing it wrote was touched since its last success in this
// checkout (scripts/build-stamp.ts).
// `--force` builds anyway.
import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";
import { join } from "node:path";
import {
  BUILD_OUTPUTS,
  BUILD_PROJECTS,
  buildInputsHash,
  stampPath,
  upToDate,
  writeStamp,
} from "./build-stamp.ts";

const root = join(import.meta.dirname, "..");
const hash = buildInputsHash(root);
if (!process.argv.includes("--force") && upToDate(root, hash)) {
  process.stdout.write(`build: up to date (inputs ${hash.slice(0, 12)}), nothing to do\n`);
} else {
  rmSync(stampPath(root), { force: true });
  for (const output of ["dist", "dist-handlers"])
    rmSync(join(root, output), { recursive: true, force: true });
  const run = (command: string, args: string[]): void => {
    execFileSync(command, args, { cwd: root, stdio: "inherit" });
  };
  run("npm", ["run", "build", "--workspaces"]);
  const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
  for (const project of BUILD_PROJECTS) run(process.execPath, [tsc, "-p", project]);
  run(process.execPath, [join(root, "scripts", "copy-build-assets.ts")]);
  // The hash from before the build: an input edited while it ran leaves a stamp that no longer matches.
  writeStamp(root, hash);
  process.stdout.write(`build: done (inputs ${hash.slice(0, 12)}; ${BUILD_OUTPUTS.join(", ")})\n`);
}
