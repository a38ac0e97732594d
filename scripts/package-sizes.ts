/**
 * `npm run package-sizes`: packs each package, installs each alone into an empty project (scripts/packages.ts)
 * and prints what it brings under node_modules: its apparent size (the files' sizes), its disk usage (`du`,
 * the blocks the files take), and how many packages. The figures in docs/packages.md and the README come from this.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  apparentBytes,
  diskUsage,
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
  process.stdout.write("package             tarball   apparent   disk (du)   packages\n");
  for (const name of Object.keys(PACKAGES) as PackageName[]) {
    const project = await mkdtemp(join(work, `${name}-`));
    await installInto(project, [tarballs[name]]);
    const tree = await productionTree(project);
    const modules = join(project, "node_modules");
    const tarball = (await apparentBytes(tarballs[name])) / 1024;
    process.stdout.write(
      `${name.padEnd(20)}${`${tarball.toFixed(0)} kB`.padStart(7)}` +
        `${`${megabytes(await apparentBytes(modules))} MB`.padStart(11)}` +
        `${`${megabytes(await diskUsage(modules))} MB`.padStart(12)}` +
        `${String(tree.size).padStart(11)}\n`,
    );
  }
} finally {
  await rm(work, { recursive: true, force: true });
}
