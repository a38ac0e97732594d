// Whether `npm run build` has anything to do: the hash of every file the build reads, and the list of the files it
// wrote, compared with the stamp the last successful build of this checkout left. Test runs side by side each build
// (the packed and App Service tests, under test/helpers/repo-lock.ts), and with the sources unchanged all but the
// first find the stamp equal. The outputs are in the stamp because other commands write them too (a package's own
// `npm run build`, `npm pack`'s prepack, a `tsc -p` by hand): an output the stamp did not see written is rebuilt.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, sep } from "node:path";

/** The tsc projects scripts/build.ts compiles after the workspaces' builds (each `packages/*` compiles its tsconfig.json). */
export const BUILD_PROJECTS = [
  "tsconfig.build.json",
  "packages/dev/tsconfig.testing.json",
  "tsconfig.handlers.json",
] as const;

/** The folders and files the build reads (tsc's sources and configs, the asset copies, the lock's versions). */
export const BUILD_INPUTS = [
  "src",
  "handlers",
  "packages",
  "package.json",
  "package-lock.json",
  "tsconfig.json",
  "tsconfig.build.json",
  "tsconfig.handlers.json",
  "scripts/build.ts",
  "scripts/build-stamp.ts",
  "scripts/copy-build-assets.ts",
  "scripts/copy-relay-migrations.ts",
] as const;

/** What the build writes; a missing one means building again whatever the stamp says. */
export const BUILD_OUTPUTS = [
  "dist",
  "dist-handlers",
  "packages/dev/dist",
  "packages/publisher/dist",
] as const;

/** Folders inside the inputs that are outputs or installs, not sources. */
const SKIPPED = new Set(["node_modules", "dist", "dist-handlers"]);

function files(root: string, path: string, skipped: ReadonlySet<string> = SKIPPED): string[] {
  const full = join(root, path);
  if (!existsSync(full)) return [];
  if (!statSync(full).isDirectory()) return [path];
  return readdirSync(full, { withFileTypes: true }).flatMap((entry) => {
    if (entry.isDirectory() && skipped.has(entry.name)) return [];
    return entry.isDirectory() || entry.isFile() ? files(root, join(path, entry.name), skipped) : [];
  });
}

const slashed = (file: string): string => file.split(sep).join("/");

/** Every file the build reads, relative to the root with "/" between folders, sorted. */
export function buildInputFiles(root: string): string[] {
  return BUILD_INPUTS.flatMap((input) => files(root, input))
    .map(slashed)
    .sort();
}

/** The SHA-256 of every input file's path and content, and of the Node version that runs the build. */
export function buildInputsHash(root: string): string {
  const hash = createHash("sha256").update(`node ${process.version}\n`);
  for (const file of buildInputFiles(root)) {
    hash.update(`${file}\n`);
    hash.update(readFileSync(join(root, file)));
    hash.update("\n");
  }
  return hash.digest("hex");
}

/**
 * One line per file under the outputs: its path, size and content's SHA-256 (the outputs are a few MB, hashed in
 * tens of milliseconds; a size and mtime would miss a rewrite within the clock's step or a copy that keeps mtimes).
 */
export function outputsManifest(root: string): string[] {
  return BUILD_OUTPUTS.flatMap((output) => files(root, output, new Set()))
    .map(slashed)
    .sort()
    .map((file) => {
      const content = readFileSync(join(root, file));
      return `${file} ${content.length} ${createHash("sha256").update(content).digest("hex")}`;
    });
}

/** Where the stamp lives: beside the test locks, outside everything the build or `npm pack` writes and reads. */
export function stampPath(root: string): string {
  return join(root, "node_modules", ".cache", "sbinbox-build", "stamp.txt");
}

/** After a successful build: the inputs' hash from before it, then the manifest of what it wrote. */
export function writeStamp(root: string, hash: string): void {
  mkdirSync(dirname(stampPath(root)), { recursive: true });
  writeFileSync(stampPath(root), [hash, ...outputsManifest(root)].join("\n") + "\n");
}

/**
 * The build is up to date: every output is there, the inputs hash as they did before the last build, and the
 * outputs are exactly the files it wrote (none rewritten, removed or added since).
 */
export function upToDate(root: string, hash: string): boolean {
  if (!BUILD_OUTPUTS.every((output) => existsSync(join(root, output)))) return false;
  let stamp: string;
  try {
    stamp = readFileSync(stampPath(root), "utf8");
  } catch {
    return false;
  }
  return stamp === [hash, ...outputsManifest(root)].join("\n") + "\n";
}
