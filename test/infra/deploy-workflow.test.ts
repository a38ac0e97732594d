import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { parse } from "yaml";
import { compileTemplate, isObject, str, templates, type Json, type JsonObject } from "./arm.ts";

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

  it("builds in one job, deploys the infrastructure in a second and migrates and ships in a third", function () {
    assert.deepEqual(Object.keys(jobs).sort(), ["app", "build", "infra"]);
    assert.equal(jobs.infra!.needs, undefined, "the infrastructure needs no artifact");
    assert.deepEqual(jobs.app!.needs, ["build", "infra"]);
    assert.deepEqual(workflow.permissions, { contents: "read" });
  });

  it("gives infra and app different GitHub environments, so their tokens carry different subjects", function () {
    assert.equal(jobs.infra!.environment, "${{ inputs.environment }}");
    assert.equal(jobs.app!.environment, "${{ inputs.environment }}-app");
    assert.equal(jobs.build!.environment, undefined, "environment secrets stay out of the build");
  });

  it("gives the OIDC token to infra and app only; the build job has no environment and no id-token", function () {
    assert.deepEqual(jobs.build!.permissions, { contents: "read" });
    for (const job of ["infra", "app"]) {
      assert.equal(jobs[job]!.permissions?.["id-token"], "write", job);
      assert.ok(
        uses(jobs[job]!).some((u) => u.startsWith("azure/login@")),
        job,
      );
    }
    assert.ok(!uses(jobs.build!).some((u) => u.startsWith("azure/login@")));
    assert.doesNotMatch(JSON.stringify(jobs.build), /secrets\./);
  });

  it("keeps the artifact's code out of the job that holds the RBAC administrator role", function () {
    // infra never downloads the package, runs no node, no migrate, no zip deploy: only the Bicep.
    assert.ok(!uses(jobs.infra!).some((u) => u.startsWith("actions/download-artifact@")));
    assert.ok(!uses(jobs.infra!).some((u) => u.startsWith("actions/setup-node@")));
    assert.doesNotMatch(runs(jobs.infra!), /\bnode |postprovision|bin\/sbinbox|webapp deploy|npm /);
    assert.match(runs(jobs.infra!), /az deployment group create/);
    // The app job does what runs the artifact and ships it, and deploys no template.
    assert.match(runs(jobs.app!), /postprovision\.sh/);
    assert.match(runs(jobs.app!), /az webapp deploy/);
    assert.doesNotMatch(runs(jobs.app!), /az deployment|az role/);
  });

  it("deploys into the environment's resource group, not at subscription scope", function () {
    const deploy = jobs.infra!.steps.find((s) => /az deployment/.test(s.run ?? ""))!;
    assert.match(
      deploy.run!,
      /az deployment group create \\\n\s+--resource-group "rg-sbinbox-\$\{ENVIRONMENT_NAME\}"/,
    );
    assert.doesNotMatch(JSON.stringify(workflow), /deployment sub create/);
  });

  it("names each environment's deployment once for all runs, so the locked history does not grow per run", async function () {
    this.timeout(300_000);
    // ARM keeps 800 deployments per resource group and cannot delete old ones under prod's CanNotDelete lock
    // (learn.microsoft.com/azure/azure-resource-manager/templates/deployment-history-deletions): a name per run
    // would add the deployment and its 12 modules' nested deployments on every run.
    const deploy = jobs.infra!.steps.find((s) => /az deployment group create/.test(s.run ?? ""))!;
    const name = /--name "([^"]+)"/.exec(deploy.run!)?.[1];
    assert.equal(name, "sbinbox-${ENVIRONMENT_NAME}");
    // Each module's deployment name is derived from the parent deployment's name only (no utcNow, no run id).
    const main = await compileTemplate("infra/main.bicep");
    const modules = templates(main).flatMap((t) => {
      const declared: Json[] = Array.isArray(t.resources)
        ? t.resources
        : isObject(t.resources)
          ? Object.values(t.resources)
          : [];
      return declared
        .filter((r): r is JsonObject => isObject(r) && r.type === "Microsoft.Resources/deployments")
        .map((r) => str(r.name, "module deployment name"));
    });
    assert.equal(
      modules.length,
      17,
      "the template's module deployments: the alert coverage one, the archive, its endpoint, the operators' roles and their jump box among them",
    );
    for (const module of modules) {
      assert.match(
        module,
        /^\[format\('(\w+)-\{0\}', uniqueString\('\1', deployment\(\)\.name\)\)\]$/,
        module,
      );
    }
  });

  it("installs and caches packages only in the build job; the app job runs the built artifact", function () {
    assert.match(runs(jobs.build!), /npm ci/);
    assert.match(runs(jobs.build!), /scripts\/package-worker\.sh/);
    assert.doesNotMatch(runs(jobs.app!), /npm (ci|install)|npx /);
    const setupNode = (job: Job) => job.steps.find((s) => s.uses?.startsWith("actions/setup-node@"));
    assert.equal(setupNode(jobs.build!)?.with?.cache, "npm");
    assert.equal(setupNode(jobs.app!)?.with?.cache, undefined, "no shared cache where the credentials are");
    const uploaded = jobs.build!.steps.find((s) => s.uses?.startsWith("actions/upload-artifact@"));
    const downloaded = jobs.app!.steps.find((s) => s.uses?.startsWith("actions/download-artifact@"));
    assert.ok(uploaded?.with?.name && uploaded.with.name === downloaded?.with?.name);
    // The post-provision step runs `sbinbox migrate` from that same package, and so does the first message.
    for (const script of [/postprovision\.sh$/m, /first-message\.sh/]) {
      const step = jobs.app!.steps.find((s) => script.test(s.run ?? ""));
      assert.equal(step?.env?.SBINBOX_PACKAGE_DIR, "${{ runner.temp }}/worker", String(script));
    }
  });

  it("builds without install scripts, so no dependency's script runs where the deployed package is made", function () {
    const install = jobs.build!.steps.find((s) => /npm ci/.test(s.run ?? ""));
    assert.match(install?.run ?? "", /npm ci .*--ignore-scripts/);
  });

  it("signs in to Azure again right before each step that asks the CLI for a token after a long one", function () {
    // The CLI replays the GitHub OIDC assertion from sign-in for every new token, and the assertion lives minutes
    // (AADSTS700024): the post-provision's firewall wait outlasts it.
    const steps = jobs.app!.steps;
    const at = (pattern: RegExp) => steps.findIndex((s) => pattern.test(s.run ?? ""));
    for (const late of [/postprovision\.sh$/m, /az webapp deploy/, /first-message\.sh/]) {
      const index = at(late);
      assert.ok(index > 0, String(late));
      assert.match(
        steps[index - 1]!.uses ?? "",
        /^azure\/login@/,
        `azure/login right before ${String(late)}`,
      );
    }
    const logins = [...jobs.infra!.steps, ...steps].filter((s) => s.uses?.startsWith("azure/login@"));
    assert.equal(logins.length, 5);
    // Each job signs in with its own environment's client id (the secret of the same name, another value).
    for (const login of logins) assert.equal(login.with?.["client-id"], "${{ secrets.AZURE_CLIENT_ID }}");
  });

  it("removes the temporary firewall rules in a last step that runs whatever happened, signed in afresh", function () {
    const steps = jobs.app!.steps;
    const cleanup = steps.at(-1)!;
    assert.equal(cleanup.run, "bash infra/scripts/postprovision.sh --cleanup");
    assert.equal(cleanup.if, "always()");
    assert.match(steps.at(-2)!.uses ?? "", /^azure\/login@/);
    assert.equal(steps.at(-2)!.if, "always()");
    const post = steps.find((s) => /postprovision\.sh$/m.test(s.run ?? ""))!;
    assert.match(post.run!, /echo "SBINBOX_CLIENT_IP=\$\{SBINBOX_CLIENT_IP\}" >> "\$GITHUB_ENV"/);
  });

  it("runs the app job on the runner the dispatch names (a VNet runner for the private network), infra on a hosted one", function () {
    const app = jobs.app as Job & { "runs-on"?: string };
    assert.equal(app["runs-on"], "${{ inputs.runner }}");
    assert.equal((jobs.infra as Job & { "runs-on"?: string })["runs-on"], "ubuntu-latest");
    const inputs = (
      workflow as unknown as {
        on: {
          workflow_dispatch: { inputs: Record<string, { default?: string | boolean; description?: string }> };
        };
      }
    ).on.workflow_dispatch.inputs;
    // A choice, not free text: a typo would otherwise queue the job for a runner that never comes.
    assert.deepEqual(inputs.runner, {
      description: inputs.runner?.description,
      type: "choice",
      options: ["ubuntu-latest", "sbinbox-vnet"],
      default: "ubuntu-latest",
    });
    assert.deepEqual(inputs["first-message"], {
      description: inputs["first-message"]?.description,
      type: "boolean",
      default: false,
    });
    for (const step of jobs.app!.steps.filter(
      (s) => /first-message|^$/.test(s.run ?? "") && s.if !== "always()",
    )) {
      if (step.run?.includes("first-message") || (step.uses?.startsWith("azure/login@") && step.if)) {
        assert.equal(step.if, "inputs.first-message", step.name ?? step.uses);
      }
    }
  });

  /** A step's script alone, with only the given environment: its exit code and what it wrote to stderr. */
  async function runStepWithStderr(script: string, env: Record<string, string>) {
    return run("bash", ["-eo", "pipefail", "-c", script], {
      env: { PATH: process.env.PATH ?? "", ...env },
    }).then(
      ({ stderr }) => ({ code: 0, stderr }),
      (error: { code?: number; stderr?: string }) => ({ code: error.code ?? 1, stderr: error.stderr ?? "" }),
    );
  }

  async function runStep(script: string, env: Record<string, string>, curlAnswer = "203.0.113.9") {
    const dir = await mkdtemp(join(tmpdir(), "sbinbox-deploy-post-"));
    try {
      await mkdir(join(dir, "bin"));
      await mkdir(join(dir, "infra", "scripts"), { recursive: true });
      await writeFile(
        join(dir, "bin", "curl"),
        `#!/usr/bin/env bash\necho "curl $*" >> log\necho '${curlAnswer}'\n`,
      );
      await chmod(join(dir, "bin", "curl"), 0o755);
      await writeFile(
        join(dir, "infra", "scripts", "postprovision.sh"),
        `echo "postprovision ip=\${SBINBOX_CLIENT_IP:-none}" >> log\n`,
      );
      await writeFile(join(dir, "github_env"), "");
      let code = 0;
      await run("bash", ["-eo", "pipefail", "-c", script], {
        cwd: dir,
        env: {
          PATH: `${join(dir, "bin")}:${process.env.PATH ?? ""}`,
          GITHUB_ENV: join(dir, "github_env"),
          RUNNER_TEMP: dir,
          ...env,
        },
      }).catch((error: { code?: number }) => {
        code = error.code ?? 1;
      });
      return {
        code,
        log: (await readFile(join(dir, "log"), "utf8").catch(() => "")).trim().split("\n").filter(Boolean),
        env: (await readFile(join(dir, "github_env"), "utf8")).trim(),
      };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  it("asks api.ipify.org for the runner's address only off the private network, and takes only an IPv4 address", async function () {
    const post = jobs.app!.steps.find((s) => /postprovision\.sh$/m.test(s.run ?? ""))!;
    for (const privateNetwork of ["True", "true"]) {
      assert.deepEqual(await runStep(post.run!, { PRIVATE_NETWORK: privateNetwork }), {
        code: 0,
        log: ["postprovision ip=none"],
        env: "",
      });
    }
    for (const privateNetwork of [undefined, "False"]) {
      assert.deepEqual(
        await runStep(post.run!, privateNetwork === undefined ? {} : { PRIVATE_NETWORK: privateNetwork }),
        {
          code: 0,
          log: ["curl -fsS --max-time 20 https://api.ipify.org", "postprovision ip=203.0.113.9"],
          env: "SBINBOX_CLIENT_IP=203.0.113.9",
        },
      );
    }
    // Anything else (an error page, a line that would add a variable) stops the step before it reaches GITHUB_ENV.
    for (const answer of ["<html>busy</html>", "203.0.113.9\\nAZURE_CLIENT_ID=x", "2001:db8::1"]) {
      const result = await runStep(post.run!, {}, answer);
      assert.equal(result.code, 1, answer);
      assert.equal(result.env, "", answer);
      assert.deepEqual(result.log, ["curl -fsS --max-time 20 https://api.ipify.org"], answer);
    }
  });

  it("passes on only the named outputs, whatever the case ARM returns their names in, and checks them", async function () {
    const deployStep = jobs.infra!.steps.find((s) => /az deployment group create/.test(s.run ?? ""))!;
    const filter = /jq -c '([^']+)'/.exec(deployStep.run!)?.[1];
    assert.ok(filter, "the outputs are read with jq");
    // ARM's answer with names as azd and some API versions give them: camel case, lower case.
    const outputs = JSON.stringify({
      azurE_RESOURCE_GROUP: { type: "String", value: "rg-sbinbox-dev" },
      worker_app_name: { type: "String", value: "app-sbinbox-x" },
      PRIVATE_NETWORK: { type: "Bool", value: true },
      SERVICEBUS_QUEUE_RESOURCE_ID: { type: "String", value: "/subscriptions/s/resourceGroups/rg/x" },
    });
    const child = run("jq", ["-c", filter]);
    child.child.stdin!.end(outputs);
    const { stdout } = await child;
    // A resource id holds the subscription id, an environment secret: GitHub would drop such a job output.
    assert.deepEqual(JSON.parse(stdout), {
      AZURE_RESOURCE_GROUP: "rg-sbinbox-dev",
      WORKER_APP_NAME: "app-sbinbox-x",
      PRIVATE_NETWORK: "true",
    });
    const take = jobs.app!.steps.find((s) => s.name === "Take the deployment's outputs")!;
    assert.equal(take.env?.DEPLOYMENT, "${{ needs.infra.outputs.deployment }}");
    // The app job expects exactly the names the infra job selects.
    const selected = JSON.parse(`[${/IN\(([^)]+)\)/.exec(filter)![1]!}]`) as string[];
    const expected = JSON.parse(/expected='([^']+)'/.exec(take.run!)![1]!) as string[];
    assert.deepEqual([...expected].sort(), [...selected].sort());
    assert.equal(expected.length, 10);
    const all = Object.fromEntries(
      expected.map((name) => [name, name === "PRIVATE_NETWORK" ? "true" : "x-1"]),
    );
    const good = await runStep(take.run!, {
      DEPLOYMENT: JSON.stringify({
        ...all,
        AZURE_RESOURCE_GROUP: "rg-sbinbox-dev",
        WORKER_APP_NAME: "app-sbinbox-x",
      }),
    });
    assert.equal(good.code, 0);
    assert.equal(good.env.split("\n").length, 10);
    assert.ok(good.env.split("\n").includes("AZURE_RESOURCE_GROUP=rg-sbinbox-dev"));
    assert.ok(good.env.split("\n").includes("PRIVATE_NETWORK=true"));
    // Each refused inside jq, before a line is written: a newline that would add BASH_ENV, a value that is not a
    // string, a name missing, a name more.
    const { AZURE_RESOURCE_GROUP: _dropped, ...missing } = all;
    for (const deployment of [
      { ...all, WORKER_APP_NAME: "x\nBASH_ENV=/tmp/x" },
      { ...all, WORKER_APP_NAME: "x\nNODE_OPTIONS=--require=/tmp/x" },
      { ...all, PRIVATE_NETWORK: true },
      { ...all, SQL_SERVER_NAME: ["a"] },
      missing,
      { ...all, BASH_ENV: "/tmp/x" },
      ["AZURE_RESOURCE_GROUP=x"],
    ]) {
      const bad = await runStep(take.run!, { DEPLOYMENT: JSON.stringify(deployment) });
      assert.equal(bad.code, 1, JSON.stringify(deployment));
      assert.equal(bad.env, "", JSON.stringify(deployment));
    }
    const none = await runStep(take.run!, { DEPLOYMENT: "" });
    assert.equal(none.code, 1, "an output GitHub dropped (it held a secret's value) stops the job by name");
    assert.match(runs(jobs.app!), /"\$AZURE_RESOURCE_GROUP"/);
    assert.match(runs(jobs.app!), /"\$WORKER_APP_NAME"/);
  });

  it("refuses first-message outside prod before any Azure call (only prod lists the app identity in publishers)", async function () {
    const steps = jobs.infra!.steps;
    const check = steps.findIndex((s) => s.name === "Check the inputs");
    const login = steps.findIndex((s) => s.uses?.startsWith("azure/login@"));
    assert.ok(check >= 0 && check < login, "the check runs before the sign-in");
    assert.equal(steps[check]!.env?.FIRST_MESSAGE, "${{ inputs.first-message }}");
    const dev = await runStep(steps[check]!.run!, { FIRST_MESSAGE: "true", ENVIRONMENT_NAME: "dev" });
    assert.equal(dev.code, 1);
    for (const [first, environment] of [
      ["true", "prod"],
      ["false", "dev"],
    ]) {
      const ok = await runStep(steps[check]!.run!, {
        FIRST_MESSAGE: first!,
        ENVIRONMENT_NAME: environment!,
        ALERT_EMAIL: "oncall@example.com",
        ALERT_RUNBOOK_URL: "https://github.com/o/r/blob/main/docs/operations.md",
      });
      assert.equal(ok.code, 0, `${first} ${environment}`);
    }
  });

  it("stops prod by name before any Azure call when its alerts would reach nobody or link to no page", async function () {
    const check = jobs.infra!.steps.find((s) => s.name === "Check the inputs")!;
    const prod = {
      ENVIRONMENT_NAME: "prod",
      FIRST_MESSAGE: "false",
      ALERT_EMAIL: "",
      ALERT_ACTION_GROUP_ID: "",
    };
    const runbook = "https://github.com/o/r/blob/main/docs/operations.md";
    const cases: [Record<string, string>, number, RegExp | undefined][] = [
      [{ ...prod, ALERT_RUNBOOK_URL: runbook }, 1, /AlertRoutingMissing/],
      [
        { ...prod, ALERT_EMAIL: "oncall@example.com", ALERT_RUNBOOK_URL: "docs/operations.md" },
        1,
        /AlertRunbookUrlNotAbsolute/,
      ],
      [
        { ...prod, ALERT_EMAIL: "oncall@example.com", ALERT_RUNBOOK_URL: "http://x/ops" },
        1,
        /AlertRunbookUrlNotAbsolute/,
      ],
      [
        { ...prod, ALERT_EMAIL: "oncall@example.com", ALERT_RUNBOOK_URL: "" },
        1,
        /AlertRunbookUrlNotAbsolute/,
      ],
      [{ ...prod, ALERT_EMAIL: "oncall@example.com", ALERT_RUNBOOK_URL: runbook }, 0, undefined],
      [{ ...prod, ALERT_ACTION_GROUP_ID: "/subscriptions/s/x", ALERT_RUNBOOK_URL: runbook }, 0, undefined],
      // dev needs no routing.
      [{ ...prod, ENVIRONMENT_NAME: "dev", ALERT_RUNBOOK_URL: "" }, 0, undefined],
    ];
    for (const [env, code, message] of cases) {
      const result = await runStepWithStderr(check.run!, env);
      assert.equal(result.code, code, JSON.stringify(env));
      if (message) assert.match(result.stderr, message);
    }
  });

  it("waits for /readyz after the zip deploy, retrying the 503 a fresh instance answers", function () {
    const steps = jobs.app!.steps;
    const zip = steps.findIndex((s) => /az webapp deploy/.test(s.run ?? ""));
    const ready = steps.findIndex((s) => /\/readyz/.test(s.run ?? ""));
    // Between them only the deferred migration (postprovision.sh --after-deploy): the new instance is not ready
    // until its schema is migrated.
    const deferred = steps.findIndex((s) => /postprovision\.sh --after-deploy/.test(s.run ?? ""));
    assert.ok(zip >= 0 && deferred === zip + 1 && ready === zip + 2, "right after the zip deploy");
    assert.match(steps[ready]!.run!, /curl -fsS --retry \d+ --retry-delay \d+ --retry-all-errors/);
  });

  it("passes the plan's current instance count to the Bicep before deploying it", function () {
    const order = jobs.infra!.steps.map((s) => s.run ?? "");
    const read = order.findIndex((r) => /APP_SERVICE_PLAN_CAPACITY=/.test(r));
    const deploy = order.findIndex((r) => /az deployment group create/.test(r));
    assert.ok(read >= 0 && read < deploy);
  });

  it("passes prod's alert routing and the app identity (a publisher, for the first message) to the Bicep", function () {
    const env = (jobs.infra as Job & { env?: Record<string, string> }).env ?? {};
    for (const name of ["ALERT_EMAIL", "ALERT_ACTION_GROUP_ID", "ALERT_RUNBOOK_URL", "APP_PRINCIPAL_ID"]) {
      assert.equal(env[name], `\${{ secrets.${name} }}`, name);
    }
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
    const runs = JSON.stringify(azure).match(/postprovision\.sh(?! --after-deploy)/g) ?? [];
    assert.equal(runs.length, 1);
    // The postdeploy hook's run applies a migration predeploy deferred (exit 76) and is otherwise a no-op: without
    // the marker it exits before any az call or firewall rule (no az on this PATH: it would fail if it tried).
    const postdeploy = azure.services!.worker!.hooks?.postdeploy as { posix?: { run: string } } | undefined;
    assert.match(postdeploy?.posix?.run ?? "", /postprovision\.sh --after-deploy$/);
    const noop = spawnSync("bash", ["infra/scripts/postprovision.sh", "--after-deploy"], {
      env: { PATH: "/usr/bin:/bin", SBINBOX_DEFERRED_MIGRATION_FILE: "/nonexistent/migrate-after-deploy" },
      encoding: "utf8",
    });
    assert.equal(noop.status, 0, noop.stderr);
  });

  it("stops a Windows azd with a message instead of skipping the bash packaging or the migrations", function () {
    // azd on Windows runs each hook's `windows` entry, from Git Bash too: only WSL (a Linux azd) runs `posix`.
    for (const hook of ["prepackage", "predeploy"]) {
      const windows = (azure.services!.worker!.hooks?.[hook] as { windows?: { shell: string; run: string } })
        .windows;
      assert.equal(windows?.shell, "pwsh", hook);
      assert.match(windows?.run ?? "", /Write-Error ".*run azd inside WSL.*"; exit 1$/, hook);
      assert.doesNotMatch(windows?.run ?? "", /Git Bash/, hook);
    }
  });
});
