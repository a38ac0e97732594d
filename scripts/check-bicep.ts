/**
 * `bicep build`, `bicep lint` and `bicep build-params` over every Bicep file, with the pinned CLI. Any diagnostic,
 * a warning included, fails the check: bicepconfig.json decides what is reported, this script tolerates none of it.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runBicep } from "./bicep.ts";

const bicepPatterns = ["bicep/**/*.bicep", "infra/**/*.bicep"];
const paramPatterns = ["infra/**/*.bicepparam"];

async function main(): Promise<number> {
  const outDir = await mkdtemp(join(tmpdir(), "sbinbox-bicep-"));
  const steps: string[][] = [
    ...bicepPatterns.map((p) => ["build", "--pattern", p, "--outdir", join(outDir, "build")]),
    ...bicepPatterns.map((p) => ["lint", "--pattern", p]),
    ...paramPatterns.map((p) => ["build-params", "--pattern", p, "--outdir", join(outDir, "params")]),
    ...paramPatterns.map((p) => ["lint", "--pattern", p]),
  ];
  let failed = 0;
  try {
    for (const args of steps) {
      const result = await runBicep(args);
      const diagnostics = (result.stdout + result.stderr).trim();
      if (result.code !== 0 || diagnostics !== "") {
        failed++;
        process.stderr.write(`bicep ${args.slice(0, 3).join(" ")}: exit ${result.code}\n${diagnostics}\n`);
      }
    }
  } finally {
    await rm(outDir, { recursive: true, force: true });
  }
  process.stdout.write(`bicep: ${steps.length} steps, ${failed} with diagnostics\n`);
  return failed === 0 ? 0 : 1;
}

process.exitCode = await main();
