import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = dirname(dirname(dirname(fileURLToPath(import.meta.url))));
const locksDir = join(repoRoot, "node_modules", ".cache", "sbinbox-test-locks");

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Runs `fn` while no other test process of this checkout holds the lock `name`: for steps that write the
 * repository's own folders (dist/ by `npm run build`, the Bicep CLI's restore), which files running side by side
 * would otherwise write at once. mkdir is atomic, so the folder is the lock; one left by a dead process is taken
 * over. (A library would add a dependency for these few lines; only the tests need it.)
 */
export async function withRepoLock<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const dir = join(locksDir, name);
  await mkdir(locksDir, { recursive: true });
  for (;;) {
    try {
      await mkdir(dir);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const holder = Number(await readFile(join(dir, "pid"), "utf8").catch(() => "0"));
      // No pid yet: the holder is between its mkdir and its write; wait for it like any holder.
      if (holder > 0 && !alive(holder)) await rm(dir, { recursive: true, force: true });
      else await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  try {
    await writeFile(join(dir, "pid"), String(process.pid));
    return await fn();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
