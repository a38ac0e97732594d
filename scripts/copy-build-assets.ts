// After `tsc -p tsconfig.build.json`: copies what the compiled code reads at run time (the SQL migrations)
// from src/ to dist/, keeping their relative paths.
import { cpSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const src = join(root, "src");
const dist = join(root, "dist");

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

const assets = walk(src).filter((path) => !path.endsWith(".ts"));
for (const path of assets) cpSync(path, join(dist, relative(src, path)));
process.stdout.write(`copied ${assets.length} assets to dist/\n`);
