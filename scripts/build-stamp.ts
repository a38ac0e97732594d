// Whether `npm run build` has anything to do: the hash of every file the build reads, compared with the stamp the
// last successful build of this checkout wrote. Test runs side by side each build (the packed and App Service
// tests, under test/helpers/repo-lock.ts), and with the sources unchanged all but the first find the stamp equal.
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, sep } from "node:path";

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

function files(root: string, path: string): string[] {
  const full = join(root, path);
  if (!existsSync(full)) return [];
  if (!statSync(full).isDirectory()) return [path];
  return readdirSync(full, { withFileTypes: true }).flatMap((entry) => {
    if (entry.isDirectory() && SKIPPED.has(entry.name)) return [];
    return entry.isDirectory() || entry.isFile() ? files(root, join(path, entry.name)) : [];
  });
}

/** The SHA-256 of every input file's path and content, and of the Node version that runs the build. */
export function buildInputsHash(root: string): string {
  const hash = createHash("sha256").update(`node ${process.version}\n`);
  for (const file of BUILD_INPUTS.flatMap((input) => files(root, input)).sort()) {
    hash.update(`${file.split(sep).join("/")}\n`);
    hash.update(readFileSync(join(root, file)));
    hash.update("\n");
  }
  return hash.digest("hex");
}

/** Where the stamp lives: beside the test locks, outside everything the build or `npm pack` writes and reads. */
export function stampPath(root: string): string {
  return join(root, "node_modules", ".cache", "sbinbox-build", "inputs.sha256");
}

/** The build is up to date: every output is there and the inputs hash as they did after the last build. */
export function upToDate(root: string, hash: string): boolean {
  if (!BUILD_OUTPUTS.every((output) => existsSync(join(root, output)))) return false;
  try {
    return readFileSync(stampPath(root), "utf8").trim() === hash;
  } catch {
    return false;
  }
}
