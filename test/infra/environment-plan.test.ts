/**
 * One identity per environment and duty (scripts/environment-plan.ts, carried out by
 * scripts/environment-identities.ts): from the plan, and from the `az` and `gh` calls the script really makes
 * against stand-ins, the rights of every identity are computed (role assignment scopes against resource ids, SQL
 * admin group membership, the OIDC subjects its credential accepts), for the legacy and the immutable subject forms,
 * and no identity of dev has any right on prod's resources.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  deployRoleName,
  environmentPlan,
  resourceGroupId,
  scopeCovers,
  type EnvironmentPlan,
  type PlanInput,
} from "../../scripts/environment-plan.ts";
import type { Repository, SubjectCustomization } from "../../scripts/oidc-subject.ts";

const SUB = "11111111-2222-3333-4444-555555555555";
const octo: Repository = {
  owner: "octo-org",
  repo: "octo-repo",
  ownerId: 123456,
  repoId: 456789,
  visibility: "private",
  createdAt: "2024-03-01T10:00:00Z",
};
const forms: [string, SubjectCustomization, RegExp][] = [
  [
    "legacy",
    { use_default: true, sub_claim_prefix: "repo:octo-org/octo-repo" },
    /^repo:octo-org\/octo-repo:/,
  ],
  [
    "immutable",
    { use_default: true, sub_claim_prefix: "repo:octo-org@123456/octo-repo@456789" },
    /^repo:octo-org@123456\/octo-repo@456789:/,
  ],
];

function input(customization: SubjectCustomization): PlanInput {
  return {
    repository: octo,
    customization,
    subscriptionId: SUB,
    location: "northeurope",
    environments: ["dev", "prod"],
    privateEnvironments: ["prod"],
    lockedEnvironments: ["prod"],
    reviewedEnvironments: ["prod"],
    branch: "main",
    runnerGroup: "sbinbox-vnet",
  };
}

/** prod's resource group and resources below it, as ARM names them (and once in other letter case). */
const prodResources = [
  resourceGroupId(SUB, "prod"),
  `${resourceGroupId(SUB, "prod")}/providers/Microsoft.Web/sites/app-sbinbox-x`,
  `${resourceGroupId(SUB, "prod")}/providers/Microsoft.Sql/servers/sql-sbinbox-x`,
  `/SUBSCRIPTIONS/${SUB}/RESOURCEGROUPS/RG-SBINBOX-PROD/providers/Microsoft.ServiceBus/namespaces/sb-sbinbox-x`,
];
const devResources = [`${resourceGroupId(SUB, "dev")}/providers/Microsoft.Web/sites/app-sbinbox-y`];

/** A role's actions: the plan's custom roles as planned, the built-in ones the app identity may hold as Microsoft
 * defines them (any other built-in role is an error, so a broad one cannot slip in unchecked). */
function actionsOf(plan: EnvironmentPlan, role: string): readonly string[] {
  const custom = plan.customRoles.find((r) => r.name === role);
  if (custom) return custom.actions;
  if (role === "Reader") return ["*/read"];
  throw new Error(`no actions known for role "${role}"`);
}

/** Whether an action pattern (ARM's '*' wildcard, case-insensitive) grants the operation. */
function grants(pattern: string, operation: string): boolean {
  const re = new RegExp(
    `^${pattern
      .split("*")
      .map((p) => p.replace(/[.+?^${}()|[\]\\/]/g, "\\$&"))
      .join(".*")}$`,
    "i",
  );
  return re.test(operation);
}

/** Operations the app identity must not hold: each would let it reopen the site, deploy a template, assign a role,
 * approve a private endpoint connection or change the SQL admins. */
const forbiddenForApp = [
  "Microsoft.Web/sites/write",
  "Microsoft.Web/sites/config/write",
  "Microsoft.Web/sites/networkConfig/write",
  "Microsoft.Web/sites/privateEndpointConnections/write",
  "Microsoft.Web/sites/privateEndpointConnectionsApproval/action",
  "Microsoft.Web/sites/basicPublishingCredentialsPolicies/write",
  "Microsoft.Resources/deployments/write",
  "Microsoft.Authorization/roleAssignments/write",
  "Microsoft.Authorization/roleDefinitions/write",
  "Microsoft.Insights/components/write",
  "Microsoft.Sql/servers/write",
  "Microsoft.Sql/servers/administrators/write",
];

/** Every right an identity has, computed from the plan. */
function rightsOf(plan: EnvironmentPlan, name: string) {
  return {
    scopes: plan.roleAssignments.filter((a) => a.principal === name).map((a) => a.scope),
    roles: plan.roleAssignments.filter((a) => a.principal === name).map((a) => a.role),
    groups: plan.groups.filter((g) => g.members.includes(name)).map((g) => g.environment),
    subjects: plan.identities.filter((i) => i.name === name).map((i) => i.subject),
  };
}

describe("the environments' identities as planned (scripts/environment-plan.ts)", function () {
  for (const [form, customization, prefix] of forms) {
    describe(`${form} subjects`, function () {
      const plan = environmentPlan(input(customization));
      const dev = plan.identities.filter((i) => i.environment === "dev");
      const prod = plan.identities.filter((i) => i.environment === "prod");

      it("gives each environment two identities of its own, each with its own credential and GitHub environment", function () {
        assert.deepEqual(
          plan.identities.map((i) => [i.name, i.githubEnvironment]),
          [
            ["sbinbox-dev-infra", "dev"],
            ["sbinbox-dev-app", "dev-app"],
            ["sbinbox-prod-infra", "prod"],
            ["sbinbox-prod-app", "prod-app"],
          ],
        );
        for (const identity of plan.identities) {
          assert.match(identity.subject, prefix);
          assert.ok(
            identity.subject.endsWith(`:environment:${identity.githubEnvironment}`),
            identity.subject,
          );
        }
        assert.equal(
          new Set(plan.identities.map((i) => i.subject)).size,
          4,
          "no two identities share a subject",
        );
      });

      it("no identity of dev has any right on prod's resources: no role scope covers them, no prod group, no prod subject", function () {
        for (const identity of dev) {
          const rights = rightsOf(plan, identity.name);
          assert.ok(rights.scopes.length > 0, `${identity.name} has rights on dev`);
          for (const scope of rights.scopes) {
            for (const resource of prodResources) {
              assert.equal(
                scopeCovers(scope, resource),
                false,
                `${identity.name}: ${scope} covers ${resource}`,
              );
            }
          }
          assert.deepEqual(
            rights.groups.filter((g) => g !== "dev"),
            [],
            `${identity.name} is in no other environment's SQL admin group`,
          );
          // A dev job's token (environment dev or dev-app) matches no prod credential.
          for (const other of prod) assert.notEqual(identity.subject, other.subject);
        }
        // And the other way round: prod's identities reach nothing of dev's.
        for (const identity of prod) {
          for (const scope of rightsOf(plan, identity.name).scopes) {
            for (const resource of devResources) assert.equal(scopeCovers(scope, resource), false, scope);
          }
        }
      });

      it("scopes every role to the identity's own resource group, never the subscription", function () {
        for (const assignment of plan.roleAssignments) {
          const environment = assignment.principal.split("-")[1]!;
          assert.equal(assignment.scope, resourceGroupId(SUB, environment), assignment.principal);
          assert.equal(scopeCovers(assignment.scope, `/subscriptions/${SUB}`), false);
        }
      });

      it("separates duties: the identity that may assign roles is no SQL admin, the SQL admin may assign no role", function () {
        for (const environment of ["dev", "prod"]) {
          const infra = rightsOf(plan, `sbinbox-${environment}-infra`);
          const app = rightsOf(plan, `sbinbox-${environment}-app`);
          assert.deepEqual(infra.roles, ["Contributor", "Role Based Access Control Administrator"]);
          assert.deepEqual(infra.groups, []);
          assert.deepEqual(app.groups, [environment]);
          // By what each role grants, not by its name.
          const actions = app.roles.flatMap((role) => actionsOf(plan, role));
          for (const operation of forbiddenForApp) {
            const granting = actions.filter((a) => grants(a, operation));
            assert.deepEqual(granting, [], `sbinbox-${environment}-app may ${operation}`);
          }
          assert.deepEqual(
            actions.filter((a) => /^microsoft\.web\/sites\/(.*\/)?\*$/i.test(a) || a === "*"),
            [],
            "no wildcard on the site",
          );
          // And it can still do what the app job does: zip-deploy, read the site and the queue's counts.
          for (const operation of [
            "Microsoft.Web/sites/publish/Action",
            "Microsoft.Web/sites/read",
            "Microsoft.ServiceBus/namespaces/queues/read",
          ]) {
            assert.ok(
              actions.some((a) => grants(a, operation)),
              `sbinbox-${environment}-app may ${operation}`,
            );
          }
          assert.ok(app.roles.includes(deployRoleName(environment)));
          // The RBAC administrator role carries the ABAC condition (scripts/rbac-condition.ts).
          const rbac = plan.roleAssignments.find(
            (a) =>
              a.role === "Role Based Access Control Administrator" &&
              a.principal.startsWith(`sbinbox-${environment}-`),
          );
          assert.match(rbac?.condition ?? "", /roleAssignments\/write/);
        }
        // The deploy role per environment, the firewall role only where SQL has a public endpoint (dev), each
        // assignable in its own group only.
        assert.deepEqual(
          plan.customRoles.map((r) => [r.name, r.assignableScope]),
          [
            ["sbinbox worker deploy (rg-sbinbox-dev)", resourceGroupId(SUB, "dev")],
            ["sbinbox SQL firewall rules (rg-sbinbox-dev)", resourceGroupId(SUB, "dev")],
            ["sbinbox worker deploy (rg-sbinbox-prod)", resourceGroupId(SUB, "prod")],
          ],
        );
        // The checker itself: Website Contributor's Microsoft.Web/sites/* would be caught.
        assert.ok(grants("Microsoft.Web/sites/*", "Microsoft.Web/sites/write"));
        assert.ok(grants("Microsoft.Resources/deployments/*", "Microsoft.Resources/deployments/write"));
        assert.ok(!grants("*/read", "Microsoft.Web/sites/write"));
      });

      it("protects both environments (from main only), prod with reviewers, locks prod, and restricts the runner group", function () {
        assert.deepEqual(
          plan.githubEnvironments.map((e) => [e.name, e.branch, e.requiresReviewer]),
          [
            ["dev", "main", false],
            ["dev-app", "main", false],
            ["prod", "main", true],
            ["prod-app", "main", true],
          ],
        );
        assert.deepEqual(plan.locks, [{ scope: resourceGroupId(SUB, "prod"), level: "CanNotDelete" }]);
        assert.deepEqual(plan.runnerGroup, {
          name: "sbinbox-vnet",
          selectedWorkflows: ["octo-org/octo-repo/.github/workflows/deploy.yml@main"],
        });
        // Each environment's secrets name its own identities and group.
        for (const environment of plan.githubEnvironments) {
          const own = environment.name.replace(/-app$/, "");
          for (const value of Object.values(environment.secrets)) {
            assert.doesNotMatch(value, new RegExp(`sbinbox-(?!${own}-)`), `${environment.name}: ${value}`);
          }
        }
      });
    });
  }

  it("refuses an environment whose name collides with another's app environment", function () {
    assert.throws(
      () => environmentPlan({ ...input(forms[0]![1]), environments: ["prod", "prod-app"] }),
      /"prod-app" collides with the app environment of "prod"/,
    );
  });

  it("reads scopes as ARM does: a scope covers itself and what is below it, not a sibling with a longer name", function () {
    assert.equal(scopeCovers(resourceGroupId(SUB, "dev"), resourceGroupId(SUB, "dev")), true);
    assert.equal(
      scopeCovers(resourceGroupId(SUB, "dev"), `${resourceGroupId(SUB, "dev")}/providers/x/y`),
      true,
    );
    assert.equal(scopeCovers(resourceGroupId(SUB, "dev"), `${resourceGroupId(SUB, "dev")}2`), false);
    assert.equal(scopeCovers(`/subscriptions/${SUB}`, resourceGroupId(SUB, "prod")), true);
  });
});

describe("scripts/environment-identities.ts against stand-ins for az and gh", function () {
  // About a hundred stand-in processes a run.
  this.timeout(180_000);
  let dir: string;
  const script = fileURLToPath(new URL("../../scripts/environment-identities.ts", import.meta.url));
  // Stand-ins that log every call (argv and stdin) as JSON and answer as az and gh would for a fresh tenant.
  const standIn = `#!/usr/bin/env node
const fs = require("node:fs");
const tool = require("node:path").basename(process.argv[1]);
const args = process.argv.slice(2);
const stdin = args.includes("--input") ? fs.readFileSync(0, "utf8") : undefined;
fs.appendFileSync(process.env.STANDIN_LOG, JSON.stringify({ tool, args, stdin }) + "\\n");
const after = (flag) => args[args.indexOf(flag) + 1];
const joined = args.join(" ");
let out = "";
if (tool === "gh") {
  if (joined === "api repos/octo-org/octo-repo") out = JSON.stringify({ id: 456789, name: "octo-repo", visibility: "private", created_at: "2024-03-01T10:00:00Z", owner: { id: 123456, login: "octo-org", type: "Organization" } });
  else if (joined === "api repos/octo-org/octo-repo/actions/oidc/customization/sub") out = process.env.STANDIN_SUB;
  else if (joined.startsWith("api orgs/octo-org/actions/runner-groups --jq")) out = "7";
  else if (joined === "api orgs/octo-org/actions/runner-groups/7") out = process.env.STANDIN_RUNNER_GROUP ?? JSON.stringify({ id: 7, restricted_to_workflows: true, selected_workflows: ["octo-org/octo-repo/.github/workflows/deploy.yml@main"] });
  else if (args.length === 2 && joined.startsWith("api repos/octo-org/octo-repo/environments/")) out = JSON.stringify({ name: joined.split("/").pop(), can_admins_bypass: process.env.STANDIN_ADMINS_BYPASS === "true" });
} else {
  if (joined.startsWith("ad app create")) out = "app-" + after("--display-name");
  else if (joined.startsWith("ad sp create")) out = "sp-" + after("--id");
  else if (joined.startsWith("ad group create")) out = "grp-" + after("--display-name");
  else if (joined.startsWith("ad group list") && after("--display-name") === process.env.STANDIN_EXISTING_GROUP) out = "grp-existing";
  else if (joined.startsWith("rest --method POST --url https://graph.microsoft.com/v1.0/groups")) out = "grp-" + JSON.parse(after("--body")).displayName;
  else if (joined.startsWith("rest --method GET --url https://graph.microsoft.com/v1.0/groups/")) out = process.env.STANDIN_ASSIGNABLE ?? "false";
  else if (joined.startsWith("ad group member check")) out = "false";
  else if (joined.startsWith("account show")) out = "tenant-1";
}
process.stdout.write(out + "\\n");
`;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-identities-"));
    for (const tool of ["az", "gh"]) {
      await writeFile(join(dir, tool), standIn);
      await chmod(join(dir, tool), 0o755);
    }
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  type Call = { tool: string; args: string[]; stdin?: string };
  function start(
    args: string[],
    sub: string,
    extraEnv: Record<string, string> = {},
  ): Promise<{ code: number; stderr: string; calls: Call[] }> {
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        [script, ...args],
        {
          env: {
            PATH: `${dir}:${dirname(process.execPath)}:${process.env.PATH ?? ""}`,
            STANDIN_SUB: sub,
            STANDIN_LOG: join(dir, "log"),
            ...extraEnv,
          },
        },
        (error, _stdout, stderr) => {
          void readFile(join(dir, "log"), "utf8")
            .catch(() => "")
            .then((log) =>
              resolve({
                code: error ? Number((error as { code?: number }).code ?? 1) : 0,
                stderr,
                calls: log
                  .trim()
                  .split("\n")
                  .filter(Boolean)
                  .map((line) => JSON.parse(line) as Call),
              }),
            );
        },
      );
    });
  }
  const after = (call: Call, flag: string) => call.args[call.args.indexOf(flag) + 1]!;
  const azCalls = (calls: Call[], prefix: string) =>
    calls.filter((c) => c.tool === "az" && c.args.join(" ").startsWith(prefix));

  for (const [form, customization, prefix] of forms) {
    it(`makes what it plans, and dev's principals get no right on prod (${form} subjects)`, async function () {
      const result = await start(
        [
          "--repo",
          "octo-org/octo-repo",
          "--subscription",
          SUB,
          "--reviewer",
          "42",
          "--runner-group",
          "sbinbox-vnet",
        ],
        JSON.stringify(customization),
      );
      assert.equal(result.code, 0, result.stderr);
      // The principals the script made, by environment (the stand-in names them after the display name).
      const principalsOf = (environment: string) =>
        azCalls(result.calls, "ad sp create")
          .map((c) => `sp-${after(c, "--id")}`)
          .filter((sp) => sp.includes(`-${environment}-`));
      const dev = principalsOf("dev");
      assert.deepEqual(dev.sort(), ["sp-app-sbinbox-dev-app", "sp-app-sbinbox-dev-infra"]);
      // Role assignments as made: assignee and scope.
      const assignments = azCalls(result.calls, "role assignment create").map((c) => ({
        who: after(c, "--assignee-object-id"),
        scope: after(c, "--scope"),
        role: after(c, "--role"),
      }));
      assert.equal(assignments.length, 9);
      assert.ok(!assignments.some((a) => a.role === "Website Contributor"));
      // The custom roles as created: the deploy role holds exactly the planned actions, in its own group only.
      const definitions = azCalls(result.calls, "role definition create").map(
        (c) =>
          JSON.parse(after(c, "--role-definition")) as {
            Name: string;
            Actions: string[];
            AssignableScopes: string[];
          },
      );
      const prodDeploy = definitions.find((d) => d.Name === "sbinbox worker deploy (rg-sbinbox-prod)")!;
      assert.deepEqual(prodDeploy.AssignableScopes, [resourceGroupId(SUB, "prod")]);
      assert.ok(prodDeploy.Actions.includes("Microsoft.Web/sites/publish/Action"));
      assert.ok(
        !prodDeploy.Actions.some((a) => a.endsWith("*") || /write/i.test(a)),
        prodDeploy.Actions.join(),
      );
      assert.equal(definitions.length, 3);
      for (const a of assignments.filter((x) => dev.includes(x.who))) {
        for (const resource of prodResources)
          assert.equal(scopeCovers(a.scope, resource), false, JSON.stringify(a));
      }
      // Group membership as made: prod's SQL admin group gets prod's app identity only.
      const groups = new Map(
        azCalls(result.calls, "ad group create").map((c) => [
          `grp-${after(c, "--display-name")}`,
          after(c, "--display-name"),
        ]),
      );
      const members = azCalls(result.calls, "ad group member add").map((c) => [
        groups.get(after(c, "--group")),
        after(c, "--member-id"),
      ]);
      assert.deepEqual(members, [
        ["sbinbox-dev-sql-admins", "sp-app-sbinbox-dev-app"],
        ["sbinbox-prod-sql-admins", "sp-app-sbinbox-prod-app"],
      ]);
      // Each credential is on its own app, for its own environment's subject.
      const credentials = azCalls(result.calls, "ad app federated-credential create").map((c) => [
        after(c, "--id"),
        (JSON.parse(after(c, "--parameters")) as { subject: string }).subject,
      ]);
      assert.equal(credentials.length, 4);
      for (const [app, subject] of credentials) {
        assert.match(subject!, prefix);
        const environment = /sbinbox-(\w+)-(infra|app)$/.exec(app!)!;
        assert.ok(
          subject!.endsWith(
            `:environment:${environment[2] === "app" ? `${environment[1]}-app` : environment[1]}`,
          ),
          `${app}: ${subject}`,
        );
      }
      // GitHub: every environment from main only, prod's with the reviewer; the runner group limited to the workflow.
      const puts = result.calls.filter(
        (c) => c.tool === "gh" && c.args.includes("PUT") && c.args.some((a) => a.includes("/environments/")),
      );
      assert.deepEqual(
        puts.map((c) => {
          const body = JSON.parse(c.stdin!) as { reviewers: unknown[]; can_admins_bypass?: boolean };
          return [c.args[3], body.reviewers, body.can_admins_bypass];
        }),
        [
          ["repos/octo-org/octo-repo/environments/dev", [], undefined],
          ["repos/octo-org/octo-repo/environments/dev-app", [], undefined],
          ["repos/octo-org/octo-repo/environments/prod", [{ type: "User", id: 42 }], false],
          ["repos/octo-org/octo-repo/environments/prod-app", [{ type: "User", id: 42 }], false],
        ],
      );
      // Both reviewed environments and the runner group are read back after they are written.
      const reads = result.calls
        .filter((c) => c.tool === "gh" && c.args.length === 2 && c.args[0] === "api")
        .map((c) => c.args[1]);
      assert.deepEqual(reads.slice(2), [
        "repos/octo-org/octo-repo/environments/prod",
        "repos/octo-org/octo-repo/environments/prod-app",
        "orgs/octo-org/actions/runner-groups/7",
      ]);
      const runnerGroup = result.calls.find((c) => c.tool === "gh" && c.args.includes("PATCH"))!;
      assert.deepEqual(JSON.parse(runnerGroup.stdin!), {
        visibility: "selected",
        restricted_to_workflows: true,
        selected_workflows: ["octo-org/octo-repo/.github/workflows/deploy.yml@main"],
      });
      assert.deepEqual(
        azCalls(result.calls, "lock create").map((c) => after(c, "--resource-group")),
        ["rg-sbinbox-prod"],
      );
      // The secrets: dev's environments get dev's client ids, never prod's.
      const secrets = result.calls.filter((c) => c.tool === "gh" && c.args[0] === "secret");
      for (const secret of secrets.filter((c) => after(c, "--env").startsWith("dev"))) {
        assert.doesNotMatch(after(secret, "--body"), /prod/, secret.args.join(" "));
      }
      assert.equal(
        after(
          secrets.find((c) => after(c, "--env") === "prod-app" && c.args[2] === "AZURE_CLIENT_ID")!,
          "--body",
        ),
        "app-sbinbox-prod-app",
      );
    });
  }

  const fullRun = [
    "--repo",
    "octo-org/octo-repo",
    "--subscription",
    SUB,
    "--reviewer",
    "42",
    "--runner-group",
    "sbinbox-vnet",
  ];

  it("stops by name when prod's environment reads back that administrators may bypass its reviewers", async function () {
    const result = await start(fullRun, JSON.stringify(forms[0]![1]), { STANDIN_ADMINS_BYPASS: "true" });
    assert.equal(result.code, 2);
    assert.match(
      result.stderr,
      /AdminBypassEnabled: GitHub environment prod reads back can_admins_bypass=true/,
    );
  });

  for (const [what, group] of [
    [
      "not restricted to workflows (no GitHub Enterprise Cloud)",
      { restricted_to_workflows: false, selected_workflows: [] },
    ],
    [
      "restricted to another workflow as well",
      {
        restricted_to_workflows: true,
        selected_workflows: [
          "octo-org/octo-repo/.github/workflows/deploy.yml@main",
          "octo-org/octo-repo/.github/workflows/ci.yml@main",
        ],
      },
    ],
  ] as const) {
    it(`stops by name when the runner group reads back ${what}`, async function () {
      const result = await start(fullRun, JSON.stringify(forms[0]![1]), {
        STANDIN_RUNNER_GROUP: JSON.stringify({ id: 7, ...group }),
      });
      assert.equal(result.code, 2);
      assert.match(result.stderr, /RunnerGroupNotRestricted: runner group "sbinbox-vnet" reads back/);
      assert.match(result.stderr, /needs GitHub Enterprise Cloud/);
    });
  }

  it("with --role-assignable-groups creates prod's SQL admin group role-assignable (Graph), dev's as before", async function () {
    const result = await start([...fullRun, "--role-assignable-groups"], JSON.stringify(forms[0]![1]));
    assert.equal(result.code, 0, result.stderr);
    const posts = azCalls(result.calls, "rest --method POST").map(
      (c) => JSON.parse(after(c, "--body")) as { displayName: string; isAssignableToRole: boolean },
    );
    assert.deepEqual(
      posts.map((b) => [b.displayName, b.isAssignableToRole]),
      [["sbinbox-prod-sql-admins", true]],
    );
    assert.deepEqual(
      azCalls(result.calls, "ad group create").map((c) => after(c, "--display-name")),
      ["sbinbox-dev-sql-admins"],
    );
    // prod's app identity still becomes its only member.
    assert.deepEqual(
      azCalls(result.calls, "ad group member add").map((c) => [after(c, "--group"), after(c, "--member-id")]),
      [
        ["grp-sbinbox-dev-sql-admins", "sp-app-sbinbox-dev-app"],
        ["grp-sbinbox-prod-sql-admins", "sp-app-sbinbox-prod-app"],
      ],
    );
  });

  it("with --role-assignable-groups stops by name at an existing prod group that is not role-assignable", async function () {
    const result = await start([...fullRun, "--role-assignable-groups"], JSON.stringify(forms[0]![1]), {
      STANDIN_EXISTING_GROUP: "sbinbox-prod-sql-admins",
    });
    assert.equal(result.code, 2);
    assert.match(
      result.stderr,
      /GroupNotRoleAssignable: sbinbox-prod-sql-admins exists and is not role-assignable/,
    );
    assert.equal(
      azCalls(result.calls, "ad group member add").length,
      1,
      "dev's member only, nothing added to prod's",
    );
  });

  it("refuses to go on without a reviewer for prod, before it changes anything", async function () {
    const result = await start(
      ["--repo", "octo-org/octo-repo", "--subscription", SUB],
      JSON.stringify(forms[0]![1]),
    );
    assert.equal(result.code, 2);
    assert.match(result.stderr, /environment prod requires a reviewer: give --reviewer/);
    assert.deepEqual(
      result.calls.map((c) => c.tool),
      ["gh", "gh"],
      "only GitHub's repository facts were read",
    );
  });

  it("with --dry-run prints the plan and changes nothing", async function () {
    const result = await start(
      ["--repo", "octo-org/octo-repo", "--subscription", SUB, "--dry-run"],
      JSON.stringify(forms[1]![1]),
    );
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(
      result.calls.map((c) => c.tool),
      ["gh", "gh"],
    );
  });
});
