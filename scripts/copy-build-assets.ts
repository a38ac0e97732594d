// After the two tsc builds: copies what the compiled code reads at run time (the SQL migrations) from src/ to
// dist/ and from handlers/ to dist-handlers/, keeping their relative paths.
import { cpSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";

const root = new URL("..", import.meta.url).pathname;

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

for (const [from, to] of [
  ["src", "dist"],
  ["handlers", "dist-handlers"],
]) {
  // A module's tests (notes.test.ts, a .test.mjs of a team's) stay out of the deployed package.
  const assets = walk(join(root, from!)).filter(
    (path) => !path.endsWith(".ts") && !/\.test\.[^/]*$/.test(path),
  );
  for (const path of assets) cpSync(path, join(root, to!, relative(join(root, from!), path)));
  process.stdout.write(`copied ${assets.length} assets to ${to}/\n`);
}
