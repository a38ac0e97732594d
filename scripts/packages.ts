/**
 * The three packages as a user gets them: packed with `npm pack`, installed into an empty project, measured.
 * Used by scripts/package-sizes.ts (the figures in docs/packages.md) and test/packages/packed.test.ts.
 *
 * The empty project is installed offline, from the npm cache `npm ci` filled. `npm ci` caches tarballs but not
 * the registry's package documents, so a plain `npm install <tarball> --offline` cannot resolve a range
 * (ENOTCACHED). The project is therefore given this repository's lock entries as its own lock: npm takes from it
 * the versions the repository is tested with, resolves nothing, and prunes whatever the installed tarballs do not
 * need. The tree left is the packages' real production tree at the locked versions.
 */
import { execFile } from "node:child_process";
import { lstat, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

export const repoRoot = fileURLToPath(new URL("..", import.meta.url));
const exec = promisify(execFile);

/** The packages, by the name a user installs, with the workspace each is packed from (the root: ""). */
export const PACKAGES = {
  "sbinbox-publisher": "packages/publisher",
  sbinbox: "",
  "sbinbox-dev": "packages/dev",
} as const;
export type PackageName = keyof typeof PACKAGES;

async function npm(args: string[], cwd: string): Promise<string> {
  const { stdout } = await exec("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error"], {
    cwd,
    maxBuffer: 64 * 1024 * 1024,
  });
  return stdout;
}

/**
 * Builds every package once (`npm run build`), then packs each without running its prepack again. Returns the
 * tarballs' paths by package name.
 */
export async function packAll(destination: string): Promise<Record<PackageName, string>> {
  await exec("npm", ["run", "--silent", "build"], { cwd: repoRoot, maxBuffer: 64 * 1024 * 1024 });
  const tarballs = {} as Record<PackageName, string>;
  for (const [name, workspace] of Object.entries(PACKAGES) as [PackageName, string][]) {
    const where = workspace ? ["--workspace", workspace] : [];
    const out = await npm(
      ["pack", ...where, "--ignore-scripts", "--json", "--pack-destination", destination],
      repoRoot,
    );
    const [packed] = JSON.parse(out) as { filename: string }[];
    tarballs[name] = join(destination, packed!.filename);
  }
  return tarballs;
}

/** Installs the tarballs into `dir`, an empty folder, as production dependencies; offline (see above). */
export async function installInto(dir: string, tarballs: string[]): Promise<void> {
  const dependencies: Record<string, string> = {};
  for (const tarball of tarballs) {
    const name = /([^/]+)-\d+\.\d+\.\d+[^/]*\.tgz$/.exec(tarball)?.[1];
    if (!name) throw new Error(`not a packed tarball: ${tarball}`);
    dependencies[name] = `file:${tarball}`;
  }
  const manifest = { name: "empty-project", version: "1.0.0", private: true, type: "module", dependencies };
  await installProduction(dir, manifest, ["--offline"]);
}

/**
 * Writes `manifest` into `dir` with this repository's locked versions as its lock, and installs its production
 * dependencies without install scripts (npm 11 runs none a project has not approved in allowScripts, and these
 * projects approve none). npm keeps what the manifest needs and prunes the rest.
 */
export async function installProduction(
  dir: string,
  manifest: { dependencies?: Record<string, string> },
  flags: string[],
): Promise<void> {
  const lock = JSON.parse(await readFile(join(repoRoot, "package-lock.json"), "utf8")) as {
    packages: Record<string, { link?: boolean }>;
  };
  const packages: Record<string, unknown> = { "": manifest };
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (path.startsWith("node_modules/") && !entry.link) packages[path] = entry;
  }
  await writeFile(join(dir, "package.json"), JSON.stringify(manifest, null, 2) + "\n");
  await writeFile(join(dir, "package-lock.json"), JSON.stringify({ lockfileVersion: 3, packages }, null, 2));
  await npm(["install", ...flags, "--omit=dev", "--ignore-scripts"], dir);
}

interface LsNode {
  version?: string;
  dependencies?: Record<string, LsNode>;
}

/** Every package in the project's production tree, as `name@version`, from `npm ls --all --omit=dev`. */
export async function productionTree(dir: string): Promise<Set<string>> {
  const tree = JSON.parse(await npm(["ls", "--all", "--omit=dev", "--json"], dir)) as LsNode;
  const found = new Set<string>();
  const walk = (deps: Record<string, LsNode> | undefined): void => {
    for (const [name, node] of Object.entries(deps ?? {})) {
      // An optional dependency or optional peer that is not installed (another platform's binary, pg's pg-native,
      // sbinbox-publisher's pg, mssql, tedious: npm 11 installs no optional peer) is listed as `{}`, with no
      // version: it is not in the tree. A missing required one makes `npm ls` exit non-zero, and this throws.
      if (node.version === undefined) continue;
      // npm lists a package's dependencies under one of its places only (the others say "deduped"): walk all.
      found.add(`${name}@${node.version}`);
      walk(node.dependencies);
    }
  };
  walk(tree.dependencies);
  return found;
}

/**
 * The apparent size of `path`: the sum of its files' sizes, links not followed (as `du -sb` counts them). What
 * the files hold, not what the disk gives them: node_modules is thousands of small files, each taking whole
 * blocks, so its disk usage (`diskUsage`) is far larger.
 */
export async function apparentBytes(path: string): Promise<number> {
  const info = await lstat(path);
  if (!info.isDirectory()) return info.size;
  let total = 0;
  for (const entry of await readdir(path)) total += await apparentBytes(join(path, entry));
  return total;
}

/** The disk space `path` takes, in bytes, as `du -sk` reports it (blocks allocated; the file system's choice). */
export async function diskUsage(path: string): Promise<number> {
  const { stdout } = await exec("du", ["-sk", path]);
  return Number.parseInt(stdout, 10) * 1024;
}

export const megabytes = (bytes: number): string => (bytes / 1024 / 1024).toFixed(1);
