/**
 * The ranges the three published packages declare, read as npm reads them (the semver package, npm's own rules).
 * A caret on a prerelease is a trap: `^1.0.0-beta.47` admits every later prerelease of 1.0.0, and "preview" sorts
 * after "beta", so a registry install of the worker once resolved the years-old `1.0.0-preview.6` (npm's `latest`
 * tag) of the Azure Monitor exporter, and the worker crashed on start with Application Insights configured. A
 * prerelease is therefore pinned to the exact version the lock tests; stable ranges cannot pick up a prerelease
 * under npm's rules, so they keep their carets.
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import semver from "semver";
import { PACKAGES, repoRoot } from "../../scripts/packages.ts";

interface Manifest {
  name: string;
  version: string;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}

const readJson = async <T>(path: string): Promise<T> => JSON.parse(await readFile(path, "utf8")) as T;

/**
 * True when npm could install a prerelease for `range`: under its rules a prerelease satisfies a range only when a
 * comparator names a prerelease of the same version. The upper bounds semver writes for carets and tildes
 * (`^8.23.1` is `>=8.23.1 <9.0.0-0`) name one, but nothing below `-0` exists, so they admit none.
 */
function admitsPrerelease(range: string): boolean {
  return new semver.Range(range).set.some((comparators) =>
    comparators.some(
      ({ operator, semver: bound }) =>
        bound.prerelease.length > 0 && !(operator === "<" && bound.prerelease.join(".") === "0"),
    ),
  );
}

const lock = await readJson<{ packages: Record<string, { version?: string; link?: boolean }> }>(
  join(repoRoot, "package-lock.json"),
);
const manifests = await Promise.all(
  Object.values(PACKAGES).map((workspace) => readJson<Manifest>(join(repoRoot, workspace, "package.json"))),
);
const workspaceVersions = new Map(manifests.map((manifest) => [manifest.name, manifest.version]));
/** The version the repository is tested with: the lock's, or a workspace's own. */
const lockedVersion = (name: string): string | undefined =>
  workspaceVersions.get(name) ?? lock.packages[`node_modules/${name}`]?.version;

describe("the published packages' dependency ranges", () => {
  it("the check sees the trap: ^1.0.0-beta.47 admits 1.0.0-preview.6, a stable caret admits no prerelease", () => {
    assert.ok(admitsPrerelease("^1.0.0-beta.47"));
    assert.ok(semver.satisfies("1.0.0-preview.6", "^1.0.0-beta.47"));
    assert.ok(!admitsPrerelease("^4.14.1"));
    assert.ok(!semver.satisfies("4.15.0-beta.1", "^4.14.1"));
    assert.ok(!semver.satisfies("9.0.0-alpha.1", "^8.23.1"));
  });

  for (const manifest of manifests) {
    const declared = {
      ...manifest.dependencies,
      ...manifest.optionalDependencies,
      ...manifest.peerDependencies,
    };
    it(`${manifest.name}: each range holds the locked version, and a prerelease is pinned exactly`, () => {
      assert.ok(Object.keys(declared).length > 0, "the probe must see the manifest's dependencies");
      for (const [name, range] of Object.entries(declared)) {
        const locked = lockedVersion(name);
        assert.ok(locked, `${name} is not in package-lock.json`);
        assert.ok(semver.satisfies(locked, range), `${name}@${range} does not hold the locked ${locked}`);
        if (admitsPrerelease(range)) {
          // Pinned: npm can resolve it to the locked version and nothing else.
          assert.equal(range, locked, `${name}@${range} admits prereleases other than the locked ${locked}`);
        }
      }
    });
  }
});
