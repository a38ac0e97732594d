import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { parse } from "yaml";

const run = promisify(execFile);

type Step = {
  if?: string;
  uses?: string;
  run?: string;
  with?: Record<string, unknown>;
  name?: string;
  env?: Record<string, string>;
};
type Job = {
  needs?: string | string[];
  environment?: string;
  permissions?: Record<string, string>;
  steps: Step[];
};

async function yamlFile<T>(path: string): Promise<T> {
  return parse(await readFile(new URL(`../../${path}`, import.meta.url), "utf8")) as T;
}

describe("the deploy workflow's structure (.github/workflows/deploy.yml)", function () {
  let jobs: Record<string, Job>;
  let workflow: { permissions: Record<string, string>; jobs: Record<string, Job> };

  before(async () => {
    workflow = await yamlFile(".github/workflows/deploy.yml");
    jobs = workflow.jobs;
  });

  const runs = (job: Job) => job.steps.map((s) => s.run ?? "").join("\n");
  const uses = (job: Job) => job.steps.map((s) => s.uses ?? "");

  it("builds in one job and deploys from another that needs it", function () {
    assert.deepEqual(Object.keys(jobs).sort(), ["build", "deploy"]);
    assert.equal(jobs.deploy!.needs, "build");
    assert.deepEqual(workflow.permissions, { contents: "read" });
  });

  it("gives the OIDC token to the deploy job only; the build job has no environment and no id-token", function () {
    assert.deepEqual(jobs.build!.permissions, { contents: "read" });
    assert.equal(jobs.build!.environment, undefined, "environment secrets stay out of the build");
    assert.equal(jobs.deploy!.permissions?.["id-token"], "write");
    assert.ok(uses(jobs.deploy!).some((u) => u.startsWith("azure/login@")));
    assert.ok(!uses(jobs.build!).some((u) => u.startsWith("azure/login@")));
    assert.doesNotMatch(JSON.stringify(jobs.build), /secrets\./);
  });

  it("installs and caches packages only in the build job; the deploy job runs the built artifact", function () {
    assert.match(runs(jobs.build!), /npm ci/);
    assert.match(runs(jobs.build!), /scripts\/package-worker\.sh/);
    assert.doesNotMatch(runs(jobs.deploy!), /npm (ci|install)|npx /);
    const setupNode = (job: Job) => job.steps.find((s) => s.uses?.startsWith("actions/setup-node@"));
    assert.equal(setupNode(jobs.build!)?.with?.cache, "npm");
    assert.equal(
      setupNode(jobs.deploy!)?.with?.cache,
      undefined,
      "no shared cache where the credentials are",
    );
    const uploaded = jobs.build!.steps.find((s) => s.uses?.startsWith("actions/upload-artifact@"));
    const downloaded = jobs.deploy!.steps.find((s) => s.uses?.startsWith("actions/download-artifact@"));
    assert.ok(uploaded?.with?.name && uploaded.with.name === downloaded?.with?.name);
    // The post-provision step runs `sbinbox migrate` from that same package.
    const post = jobs.deploy!.steps.find((s) => /postprovision\.sh/.test(s.run ?? ""));
    assert.equal(post?.env?.SBINBOX_PACKAGE_DIR, "${{ runner.temp }}/worker");
  });

  it("builds without install scripts, so no dependency's script runs where the deployed package is made", function () {
    const install = jobs.build!.steps.find((s) => /npm ci/.test(s.run ?? ""));
    assert.match(install?.run ?? "", /npm ci .*--ignore-scripts/);
  });

  it("signs in to Azure again right before each step that asks the CLI for a token after a long one", function () {
    // The CLI replays the GitHub OIDC assertion from sign-in for every new token, and the assertion lives minutes
    // (AADSTS700024): the Bicep deployment and the post-provision's firewall wait each outlast it.
    const steps = jobs.deploy!.steps;
    const at = (pattern: RegExp) => steps.findIndex((s) => pattern.test(s.run ?? ""));
    for (const late of [/postprovision\.sh/, /az webapp deploy/]) {
      const index = at(late);
      assert.ok(index > 0, String(late));
      assert.match(
        steps[index - 1]!.uses ?? "",
        /^azure\/login@/,
        `azure/login right before ${String(late)}`,
      );
    }
    const logins = steps.filter((s) => s.uses?.startsWith("azure/login@"));
    assert.equal(logins.length, 4);
    for (const login of logins) assert.deepEqual(login.with, logins[0]!.with);
  });

  it("removes the temporary firewall rules in a last step that runs whatever happened, signed in afresh", function () {
    const steps = jobs.deploy!.steps;
    const cleanup = steps.at(-1)!;
    assert.equal(cleanup.run, "bash infra/scripts/postprovision.sh --cleanup");
    assert.equal(cleanup.if, "always()");
    assert.match(steps.at(-2)!.uses ?? "", /^azure\/login@/);
    assert.equal(steps.at(-2)!.if, "always()");
    // The clean-up deletes the rules of this runner's address, which the post-provision step keeps for it.
    const post = steps.find((s) => /postprovision\.sh$/m.test(s.run ?? ""))!;
    assert.match(post.run!, /echo "SBINBOX_CLIENT_IP=\$\{SBINBOX_CLIENT_IP\}" >> "\$GITHUB_ENV"/);
  });

  it("runs the deploy job on the runner the dispatch names (a VNet runner for the private network)", function () {
    const deploy = jobs.deploy as Job & { "runs-on"?: string };
    assert.equal(deploy["runs-on"], "${{ inputs.runner }}");
    const inputs = (
      workflow as unknown as {
        on: { workflow_dispatch: { inputs: Record<string, { default?: string; description?: string }> } };
      }
    ).on.workflow_dispatch.inputs;
    assert.equal(inputs.runner?.default, "ubuntu-latest");
    // A choice, not free text: a typo would otherwise queue the job for a runner that never comes.
    assert.deepEqual(inputs.runner, {
      description: inputs.runner?.description,
      type: "choice",
      options: ["ubuntu-latest", "sbinbox-vnet"],
      default: "ubuntu-latest",
    });
  });

  it("asks api.ipify.org for the runner's address only off the private network", async function () {
    const post = jobs.deploy!.steps.find((s) => /postprovision\.sh$/m.test(s.run ?? ""))!;
    const dir = await mkdtemp(join(tmpdir(), "sbinbox-deploy-post-"));
    try {
      await mkdir(join(dir, "bin"));
      await mkdir(join(dir, "infra", "scripts"), { recursive: true });
      await writeFile(
        join(dir, "bin", "curl"),
        `#!/usr/bin/env bash\necho "curl $*" >> log\necho 203.0.113.9\n`,
      );
      await chmod(join(dir, "bin", "curl"), 0o755);
      await writeFile(
        join(dir, "infra", "scripts", "postprovision.sh"),
        `echo "postprovision ip=\${SBINBOX_CLIENT_IP:-none}" >> log\n`,
      );
      const stepRun = async (privateNetwork: string | undefined) => {
        await rm(join(dir, "log"), { force: true });
        await writeFile(join(dir, "github_env"), "");
        await run("bash", ["-eo", "pipefail", "-c", post.run!], {
          cwd: dir,
          env: {
            PATH: `${join(dir, "bin")}:${process.env.PATH ?? ""}`,
            GITHUB_ENV: join(dir, "github_env"),
            ...(privateNetwork === undefined ? {} : { PRIVATE_NETWORK: privateNetwork }),
          },
        });
        return {
          log: (await readFile(join(dir, "log"), "utf8")).trim().split("\n"),
          env: (await readFile(join(dir, "github_env"), "utf8")).trim(),
        };
      };
      for (const privateNetwork of ["True", "true"]) {
        assert.deepEqual(await stepRun(privateNetwork), { log: ["postprovision ip=none"], env: "" });
      }
      for (const privateNetwork of [undefined, "False"]) {
        assert.deepEqual(await stepRun(privateNetwork), {
          log: ["curl -fsS https://api.ipify.org", "postprovision ip=203.0.113.9"],
          env: "SBINBOX_CLIENT_IP=203.0.113.9",
        });
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("reads the deployment's outputs whatever the case ARM returns their names in", async function () {
    const deployStep = jobs.deploy!.steps.find((s) => /az deployment sub create/.test(s.run ?? ""))!;
    const filter = /jq -r '([^']+)'/.exec(deployStep.run!)?.[1];
    assert.ok(filter, "the outputs are read with jq");
    // ARM's answer with names as azd and some API versions give them: camel case, lower case.
    const outputs = JSON.stringify({
      azurE_RESOURCE_GROUP: { type: "String", value: "rg-sbinbox-dev" },
      worker_app_name: { type: "String", value: "app-sbinbox-x" },
      WORKER_IDENTITY_CLIENT_ID: { type: "String", value: "01020304-0506-0708-090a-0b0c0d0e0f10" },
    });
    const child = run("jq", ["-r", filter]);
    child.child.stdin!.end(outputs);
    const { stdout } = await child;
    assert.deepEqual(stdout.trim().split("\n"), [
      "AZURE_RESOURCE_GROUP=rg-sbinbox-dev",
      "WORKER_APP_NAME=app-sbinbox-x",
      "WORKER_IDENTITY_CLIENT_ID=01020304-0506-0708-090a-0b0c0d0e0f10",
    ]);
    // The later steps use the upper-case names.
    assert.match(runs(jobs.deploy!), /"\$AZURE_RESOURCE_GROUP"/);
    assert.match(runs(jobs.deploy!), /"\$WORKER_APP_NAME"/);
  });

  it("passes the plan's current instance count to the Bicep before deploying it", function () {
    const order = jobs.deploy!.steps.map((s) => s.run ?? "");
    const read = order.findIndex((r) => /APP_SERVICE_PLAN_CAPACITY=/.test(r));
    const deploy = order.findIndex((r) => /az deployment sub create/.test(r));
    assert.ok(read >= 0 && read < deploy);
  });

  it("docs/deploy.md reads the outputs case-insensitively too", async function () {
    const docs = await readFile(new URL("../../docs/deploy.md", import.meta.url), "utf8");
    assert.match(docs, /\.key \| ascii_upcase/);
  });
});

describe("azure.yaml: `azd up` provisions and deploys the worker", function () {
  type AzureYaml = {
    services?: Record<
      string,
      {
        project: string;
        language: string;
        host: string;
        dist?: string;
        hooks?: Record<string, { posix: { run: string } }>;
      }
    >;
    hooks?: Record<string, { posix: { run: string } }>;
    requiredVersions?: { azd?: string };
  };
  let azure: AzureYaml;

  before(async () => {
    azure = await yamlFile("azure.yaml");
  });

  it("has a worker service on App Service whose name the Bicep tags the site with", async function () {
    const worker = azure.services?.worker;
    assert.ok(worker, "services.worker");
    assert.equal(worker.host, "appservice");
    assert.equal(worker.language, "js");
    const bicep = await readFile(
      new URL("../../bicep/modules/appservice/main.bicep", import.meta.url),
      "utf8",
    );
    assert.match(bicep, /param azdServiceName string = 'worker'/);
  });

  it("packages with the same script as the workflow, into the folder it deploys", function () {
    const worker = azure.services!.worker!;
    const prepackage = worker.hooks?.prepackage?.posix.run ?? "";
    assert.match(
      prepackage,
      new RegExp(`scripts/package-worker\\.sh ${worker.dist!.replace(/[.]/g, "\\.")}$`),
    );
  });

  it("applies the migrations before `azd deploy` ships the package, from that package", function () {
    const worker = azure.services!.worker!;
    const predeploy = worker.hooks?.predeploy?.posix.run ?? "";
    assert.equal(predeploy, `SBINBOX_PACKAGE_DIR=${worker.dist!} bash infra/scripts/postprovision.sh`);
  });

  it("requires an azd that keeps the staged package's node_modules (Azure/azure-dev#5383)", function () {
    assert.equal(azure.requiredVersions?.azd, ">= 1.18.0");
  });

  it("runs the post-provision step once, as the worker's predeploy hook: no second firewall opening under azd up", function () {
    assert.equal(azure.hooks?.postprovision, undefined);
    const runs = JSON.stringify(azure).match(/postprovision\.sh/g) ?? [];
    assert.equal(runs.length, 1);
  });

  it("stops a Windows shell with a message instead of skipping the bash packaging", function () {
    const windows = (
      azure.services!.worker!.hooks?.prepackage as { windows?: { shell: string; run: string } }
    ).windows;
    assert.equal(windows?.shell, "pwsh");
    assert.match(windows?.run ?? "", /Write-Error ".*WSL or Git Bash.*"; exit 1$/);
  });
});
