import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

/** One image of a process, as the recording preload saw it. */
export interface ImageSeen {
  pid: number;
  ppid: number;
  execArgv: string[];
}

/**
 * NODE_OPTIONS with a preload that appends each process image's pid, parent and V8 flags to a file in `dir`, one
 * JSON line each (a process that replaces itself with execve shows twice with one pid), and what it recorded.
 */
export async function imageRecorder(
  dir: string,
): Promise<{ nodeOptions: string; images: () => Promise<ImageSeen[]> }> {
  const hook = join(dir, "record-flags.mjs");
  const out = join(dir, `flags-${Date.now()}-${Math.random().toString(36).slice(2)}.jsonl`);
  await writeFile(
    hook,
    `import { appendFileSync } from "node:fs";
     appendFileSync(${JSON.stringify(out)}, JSON.stringify({ pid: process.pid, ppid: process.ppid, execArgv: process.execArgv }) + "\\n");`,
  );
  return {
    nodeOptions: `--import=${pathToFileURL(hook).href}`,
    images: async () =>
      (await readFile(out, "utf8"))
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as ImageSeen),
  };
}
