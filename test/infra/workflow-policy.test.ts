import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { workflowPolicyFindings } from "../../scripts/workflow-policy.ts";

const good = `name: x
on: push
permissions:
  contents: read
concurrency:
  group: x
jobs:
  build:
    runs-on: ubuntu-latest
    timeout-minutes: 10
    environment: prod
    permissions:
      id-token: write
    steps:
      - uses: actions/checkout@d23441a48e516b6c34aea4fa41551a30e30af803 # v6.1.0
      - run: echo hi
`;

describe("workflow policy", function () {
  it("accepts pinned actions, read-only workflow permissions, concurrency and job timeouts", function () {
    assert.deepEqual(workflowPolicyFindings(good, "good.yml"), []);
  });

  it("flags a tag instead of a SHA, a SHA without its version comment, write permissions and missing settings", function () {
    const bad = good
      .replace("actions/checkout@d23441a48e516b6c34aea4fa41551a30e30af803 # v6.1.0", "actions/checkout@v6")
      .replace(
        "      - run: echo hi",
        "      - uses: actions/setup-node@249970729cb0ef3589644e2896645e5dc5ba9c38",
      )
      .replace("  contents: read", "  contents: write")
      .replace("concurrency:\n  group: x\n", "")
      .replace("    timeout-minutes: 10\n", "");
    const findings = workflowPolicyFindings(bad, "bad.yml");
    assert.equal(findings.length, 5, findings.join("\n"));
    assert.match(findings.join("\n"), /actions\/checkout@v6/);
    assert.match(findings.join("\n"), /setup-node@2499/);
    assert.match(findings.join("\n"), /contents: write/);
    assert.match(findings.join("\n"), /no concurrency/);
    assert.match(findings.join("\n"), /job "build" has no timeout-minutes/);
  });

  it("flags a job that may ask for an OIDC token outside an environment", function () {
    const bare = good.replace("    environment: prod\n", "");
    assert.deepEqual(workflowPolicyFindings(bare, "bare.yml"), [
      'bare.yml: job "build" has id-token: write but no environment, so no environment protection rule guards its token',
    ]);
  });

  it("flags an action pinned to a major that runs on Node 20", function () {
    const old = good.replace(
      "      - run: echo hi",
      "      - uses: actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2",
    );
    assert.deepEqual(workflowPolicyFindings(old, "old.yml"), [
      "old.yml:16: actions/upload-artifact v4 runs on Node 20; v6 or later runs on Node 24",
    ]);
    const current = old.replace(
      "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2",
      "actions/upload-artifact@bbbca2ddaa5d8feaa63e36b76fdaad77386f024f # v7.0.0",
    );
    assert.deepEqual(workflowPolicyFindings(current, "current.yml"), []);
  });

  for (const file of ["ci.yml", "deploy.yml"]) {
    it(`holds for .github/workflows/${file}`, async function () {
      const text = await readFile(new URL(`../../.github/workflows/${file}`, import.meta.url), "utf8");
      assert.deepEqual(workflowPolicyFindings(text, file), []);
      assert.match(text, /^permissions:\n {2}contents: read$/m);
    });
  }

  it("deploys with OIDC: id-token write on the jobs that sign in to Azure only", async function () {
    const text = await readFile(new URL("../../.github/workflows/deploy.yml", import.meta.url), "utf8");
    assert.match(text, /^ {6}id-token: write/m);
    assert.match(text, /client-id: \$\{\{ secrets\.AZURE_CLIENT_ID \}\}/);
    assert.doesNotMatch(text, /creds:|client-secret/);
  });
});
