/**
 * `node bench/package-start.ts <stage folder>`: start time and resident memory of the worker from the App Service
 * package (scripts/package-worker.sh <stage folder>), beside the same worker run from this checkout's sources.
 *
 * Each run spawns App Service's start command (`node --max-semi-space-size=4 bin/sbinbox.js worker`) in the given
 * folder with the deployed handler module, a local broker and an embedded PostgreSQL, and times it from spawn to
 * the first 200 of /readyz (receiver attached, database reachable); RSS is read from /proc/<pid>/status at that
 * moment, as docs/benchmark.md samples memory. The first run of each is cold (no compile cache yet, as after a
 * deployment); the others reuse the cache, as a restart does.
 */
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { freePort } from "../src/embedded/free-port.ts";
import { LocalBroker } from "../src/localbroker/broker.ts";
import { median } from "./median.ts";

const stage = process.argv[2] ? resolve(process.argv[2]) : undefined;
if (!stage) {
  process.stderr.write(
    "usage: node bench/package-start.ts <stage folder built by scripts/package-worker.sh>\n",
  );
  process.exit(2);
}
const RUNS = Number(process.env.SBINBOX_BENCH_RUNS ?? 6);
const checkout = fileURLToPath(new URL("..", import.meta.url));

const rssMb = (pid: number): number =>
  Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN) / 1024;

async function ready(port: number): Promise<boolean> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200;
  } catch {
    return false;
  }
}

async function runOnce(cwd: string, handlers: string, env: Record<string, string>, cacheDir: string) {
  const port = await freePort();
  const started = performance.now();
  const child = spawn(process.execPath, ["--max-semi-space-size=4", "bin/sbinbox.js", "worker"], {
    cwd,
    env: {
      PATH: process.env.PATH!,
      ...env,
      SBINBOX_HANDLERS: handlers,
      PORT: String(port),
      NODE_COMPILE_CACHE: cacheDir,
    },
    stdio: ["ignore", "ignore", "inherit"],
  });
  try {
    while (!(await ready(port))) {
      if (child.exitCode !== null) throw new Error(`the worker in ${cwd} exited with ${child.exitCode}`);
      if (performance.now() - started > 60_000) throw new Error(`the worker in ${cwd} was not ready in 60 s`);
      await new Promise((r) => setTimeout(r, 10));
    }
    return { seconds: (performance.now() - started) / 1000, rss: rssMb(child.pid!) };
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
  }
}

const work = await mkdtemp(join(tmpdir(), "sbinbox-start-"));
const broker = await LocalBroker.start({ port: 0 });
const postgres = await EmbeddedPostgresServer.create();
try {
  const url = await postgres.createDatabase("start_bench");
  const env = {
    SBINBOX_SERVICEBUS_CONNECTION_STRING: broker.connectionString,
    SBINBOX_POSTGRES_URL: url,
    SBINBOX_QUEUE: "sbinbox",
    SBINBOX_CONSUMER: "start-bench",
    SBINBOX_HTTP_HOST: "127.0.0.1",
    SBINBOX_LOG_LEVEL: "error",
  };
  // The schema, as `sbinbox migrate` from the package creates it before the worker starts.
  await new Promise<void>((done, fail) =>
    spawn(process.execPath, ["bin/sbinbox.js", "migrate"], {
      cwd: stage,
      env: { PATH: process.env.PATH!, ...env, SBINBOX_HANDLERS: "./dist-handlers/index.js" },
      stdio: ["ignore", "ignore", "inherit"],
    }).on("exit", (code) => (code === 0 ? done() : fail(new Error(`sbinbox migrate exited ${code}`)))),
  );
  process.stdout.write(
    `load average ${loadavg()[0]!.toFixed(1)}; ${RUNS} runs each, from spawn to the first 200 of /readyz\n` +
      "where                         cold s   warm s (median)   RSS at ready MB (median)\n",
  );
  const results: Record<string, number> = {};
  for (const [label, cwd, handlers] of [
    ["App Service package (dist/)", stage, "./dist-handlers/index.js"],
    ["checkout (src/, type strip)", checkout, "./handlers/index.ts"],
  ] as const) {
    const cache = join(work, label.replace(/\W+/g, "-"));
    const runs = [];
    for (let i = 0; i < RUNS; i++) runs.push(await runOnce(cwd, handlers, env, cache));
    const warm = runs.slice(1);
    results[label] = median(warm.map((r) => r.seconds));
    process.stdout.write(
      `${label.padEnd(30)}${runs[0]!.seconds.toFixed(2).padStart(6)}` +
        `${median(warm.map((r) => r.seconds))
          .toFixed(2)
          .padStart(9)}` +
        `${median(runs.map((r) => r.rss))
          .toFixed(0)
          .padStart(20)}` +
        `   (${runs.map((r) => r.rss.toFixed(0)).join(", ")})\n`,
    );
  }
  const [pkg, src] = Object.values(results) as [number, number];
  process.stdout.write(`package/checkout warm start: ${(pkg / src).toFixed(2)}\n`);
} finally {
  await broker.stop();
  await postgres.dispose();
  await rm(work, { recursive: true, force: true });
}
