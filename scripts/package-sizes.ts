/**
 * `npm run package-sizes`: packs each package, installs each alone into an empty project (scripts/packages.ts)
 * and prints what it brings: MB on disk under node_modules, and how many packages. The figures in
 * docs/packages.md come from this.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  diskBytes,
  installInto,
  megabytes,
  packAll,
  PACKAGES,
  productionTree,
  type PackageName,
} from "./packages.ts";

const work = await mkdtemp(join(tmpdir(), "sbinbox-sizes-"));
try {
  const tarballs = await packAll(work);
  process.stdout.write("package             tarball   installed   packages\n");
  for (const name of Object.keys(PACKAGES) as PackageName[]) {
    const project = await mkdtemp(join(work, `${name}-`));
    await installInto(project, [tarballs[name]]);
    const tree = await productionTree(project);
    const tarball = `${(await diskBytes(tarballs[name])) / 1024}`;
    process.stdout.write(
      `${name.padEnd(20)}${`${Number(tarball).toFixed(0)} kB`.padStart(7)}` +
        `${`${megabytes(await diskBytes(join(project, "node_modules")))} MB`.padStart(12)}` +
        `${String(tree.size).padStart(11)}\n`,
    );
  }
} finally {
  await rm(work, { recursive: true, force: true });
}
