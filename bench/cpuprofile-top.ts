// `node bench/cpuprofile-top.ts <file.cpuprofile> [n]`: where a V8 CPU profile's time goes. Prints the top n
// functions by self time and by total time (a function's own time plus its callees', each counted once per
// stack), and self time by place (a package under node_modules, a folder under src/, Node's internals, GC, idle).
import { readFileSync } from "node:fs";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, count] = process.argv.slice(2);
if (!file) throw new Error("usage: node bench/cpuprofile-top.ts <file.cpuprofile> [n]");
const n = Number(count ?? 25);
const profile = JSON.parse(readFileSync(file, "utf8")) as Profile;
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const parent = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);

const selfUs = new Map<number, number>();
profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const total = [...selfUs.values()].reduce((a, b) => a + b, 0);

const name = (node: ProfileNode): string => {
  const { functionName, url, lineNumber } = node.callFrame;
  const where = url.replace(/^file:\/\//, "").replace(/^.*\/node_modules\//, "~/");
  return `${functionName || "(anonymous)"} ${where.replace(/^.*\/(src|bench|bin)\//, "$1/")}:${lineNumber + 1}`;
};
const place = (node: ProfileNode): string => {
  const { url, functionName } = node.callFrame;
  if (!url) return functionName.startsWith("(") ? functionName : "(native)";
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  const src = /\/(src|bench|bin)\/([^/]+)/.exec(url);
  if (src) return src[1] === "src" ? `src/${src[2]!.replace(/\.ts$/, "")}` : src[1]!;
  return url.startsWith("node:") ? "node internals" : url;
};

const selfByName = new Map<string, number>();
const totalByName = new Map<string, number>();
const selfByPlace = new Map<string, number>();
for (const [id, us] of selfUs) {
  const node = byId.get(id)!;
  selfByName.set(name(node), (selfByName.get(name(node)) ?? 0) + us);
  selfByPlace.set(place(node), (selfByPlace.get(place(node)) ?? 0) + us);
  const seen = new Set<string>();
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
    const key = name(byId.get(at)!);
    if (seen.has(key)) continue;
    seen.add(key);
    totalByName.set(key, (totalByName.get(key) ?? 0) + us);
  }
}

const top = (map: Map<string, number>, k: number) =>
  [...map.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, k)
    .map(
      ([key, us]) =>
        `${((100 * us) / total).toFixed(1).padStart(5)}%  ${(us / 1000).toFixed(0).padStart(7)} ms  ${key}`,
    );

const busy = total - (selfByPlace.get("(idle)") ?? 0);
process.stdout.write(
  [
    `${file}: ${(total / 1000).toFixed(0)} ms sampled, ${(busy / 1000).toFixed(0)} ms busy`,
    "self time by place:",
    ...top(selfByPlace, 20),
    `top ${n} by self time:`,
    ...top(selfByName, n),
    `top ${n} by total time:`,
    ...top(totalByName, n),
    "",
  ].join("\n"),
);
