/**
 * The one-time bootstrap of the environments, run by a subscription Owner who may also create app registrations and
 * groups in Entra ID and administer the GitHub repository (`az login`, `gh auth login`). It makes exactly what
 * scripts/environment-plan.ts plans, nothing more: per environment its resource group, the `infra` and `app`
 * identities with their federated credentials, role assignments on that resource group only, the SQL admin group
 * with the app identity as its only member, the GitHub environments `<env>` and `<env>-app` (deployments from the
 * branch only, reviewers where asked) with their identifier secrets, prod's delete lock, and the runner group's
 * restriction to the deploy workflow. Reruns update rather than duplicate. docs/deploy.md, "Set-up, once".
 *
 *   node scripts/environment-identities.ts --repo OWNER/REPO --subscription <id> [--location northeurope]
 *     [--environment dev --environment prod] [--reviewer <GitHub user id> ...] [--runner-group sbinbox-vnet]
 *     [--operator-group prod=<group object id> ...]   the DLQ console's operator groups the deploy identity may grant
 *     [--role-assignable-groups]   prod's SQL admin group role-assignable (Entra ID P1, Privileged Role Administrator)
 *     [--dry-run]   prints the plan as JSON and changes nothing
 */
import { execFile } from "node:child_process";
import { parseArgs } from "node:util";
import {
  DEPLOY_WORKFLOW,
  environmentPlan,
  type EnvironmentPlan,
  type PlannedCustomRole,
  type PlannedIdentity,
} from "./environment-plan.ts";
import { readRepository } from "./github-repository.ts";

const ISSUER = "https://token.actions.githubusercontent.com";
const AUDIENCE = "api://AzureADTokenExchange";

function run(file: string, args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, { maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error)
        reject(new Error(`${file} ${args.slice(0, 4).join(" ")} failed: ${stderr.trim() || error.message}`));
      else resolve(stdout.trim());
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

const az = (...args: string[]) => run("az", args);

interface Principal {
  appId: string;
  objectId: string;
}

/** The app registration of that display name and its service principal, created when missing. */
async function ensureIdentity(identity: PlannedIdentity): Promise<Principal> {
  let appId = await az(
    "ad",
    "app",
    "list",
    "--display-name",
    identity.name,
    "--query",
    "[0].appId",
    "--output",
    "tsv",
  );
  if (appId === "") {
    appId = await az(
      "ad",
      "app",
      "create",
      "--display-name",
      identity.name,
      "--query",
      "appId",
      "--output",
      "tsv",
    );
  }
  let objectId = await az(
    "ad",
    "sp",
    "list",
    "--filter",
    `appId eq '${appId}'`,
    "--query",
    "[0].id",
    "--output",
    "tsv",
  );
  if (objectId === "")
    objectId = await az("ad", "sp", "create", "--id", appId, "--query", "id", "--output", "tsv");
  const existing = (
    await az(
      "ad",
      "app",
      "federated-credential",
      "list",
      "--id",
      appId,
      "--query",
      "[].name",
      "--output",
      "tsv",
    )
  )
    .split("\n")
    .filter(Boolean);
  const verb = existing.includes(identity.credentialName) ? "update" : "create";
  await az(
    "ad",
    "app",
    "federated-credential",
    verb,
    "--id",
    appId,
    ...(verb === "update" ? ["--federated-credential-id", identity.credentialName] : []),
    "--parameters",
    JSON.stringify({
      name: identity.credentialName,
      issuer: ISSUER,
      subject: identity.subject,
      audiences: [AUDIENCE],
    }),
    "--output",
    "none",
  );
  process.stdout.write(`${identity.name}: ${identity.subject}\n`);
  return { appId, objectId };
}

async function ensureCustomRole(role: PlannedCustomRole): Promise<void> {
  const found = await az(
    "role",
    "definition",
    "list",
    "--name",
    role.name,
    "--scope",
    role.assignableScope,
    "--query",
    "[0].id",
    "--output",
    "tsv",
  );
  // A rerun updates an existing definition, so its actions are always exactly the plan's.
  await az(
    "role",
    "definition",
    found === "" ? "create" : "update",
    "--role-definition",
    JSON.stringify({
      ...(found === "" ? {} : { id: found }),
      Name: role.name,
      Description: role.description,
      Actions: role.actions,
      NotActions: [],
      AssignableScopes: [role.assignableScope],
    }),
    "--output",
    "none",
  );
}

const GRAPH_GROUPS = "https://graph.microsoft.com/v1.0/groups";

/**
 * A role-assignable group (isAssignableToRole, set at creation only; `az ad group create` has no flag for it), or
 * the existing one after checking it is one: the property cannot be changed later, so an existing plain group of that
 * name stops the run by name.
 */
async function ensureRoleAssignableGroup(name: string): Promise<string> {
  const found = await az(
    "ad",
    "group",
    "list",
    "--display-name",
    name,
    "--query",
    "[0].id",
    "--output",
    "tsv",
  );
  if (found !== "") {
    const assignable = await az(
      "rest",
      "--method",
      "GET",
      "--url",
      `${GRAPH_GROUPS}/${found}?$select=isAssignableToRole`,
      "--query",
      "isAssignableToRole",
      "--output",
      "tsv",
    );
    if (assignable !== "true") {
      throw new Error(
        `GroupNotRoleAssignable: ${name} exists and is not role-assignable (isAssignableToRole is set at creation ` +
          "only): delete it, or rename it and point SQL_ADMIN_OBJECT_ID at the new group, then rerun",
      );
    }
    return found;
  }
  return az(
    "rest",
    "--method",
    "POST",
    "--url",
    GRAPH_GROUPS,
    "--headers",
    "Content-Type=application/json",
    "--body",
    JSON.stringify({
      displayName: name,
      mailNickname: name,
      mailEnabled: false,
      securityEnabled: true,
      isAssignableToRole: true,
    }),
    "--query",
    "id",
    "--output",
    "tsv",
  );
}

async function ensureGroup(name: string, memberIds: string[], roleAssignable: boolean): Promise<string> {
  let id = roleAssignable
    ? await ensureRoleAssignableGroup(name)
    : await az("ad", "group", "list", "--display-name", name, "--query", "[0].id", "--output", "tsv");
  if (id === "")
    id = await az(
      "ad",
      "group",
      "create",
      "--display-name",
      name,
      "--mail-nickname",
      name,
      "--query",
      "id",
      "--output",
      "tsv",
    );
  for (const member of memberIds) {
    const isMember = await az(
      "ad",
      "group",
      "member",
      "check",
      "--group",
      id,
      "--member-id",
      member,
      "--query",
      "value",
      "--output",
      "tsv",
    );
    if (isMember !== "true") await az("ad", "group", "member", "add", "--group", id, "--member-id", member);
  }
  return id;
}

async function applyAzure(
  plan: EnvironmentPlan,
  principals: Map<string, Principal>,
): Promise<Map<string, string>> {
  for (const group of plan.resourceGroups) {
    await az("group", "create", "--name", group.name, "--location", group.location, "--output", "none");
  }
  for (const identity of plan.identities) principals.set(identity.name, await ensureIdentity(identity));
  for (const role of plan.customRoles) await ensureCustomRole(role);
  for (const assignment of plan.roleAssignments) {
    await az(
      "role",
      "assignment",
      "create",
      "--assignee-object-id",
      principals.get(assignment.principal)!.objectId,
      "--assignee-principal-type",
      "ServicePrincipal",
      "--role",
      assignment.role,
      "--scope",
      assignment.scope,
      ...(assignment.condition ? ["--condition", assignment.condition, "--condition-version", "2.0"] : []),
      "--output",
      "none",
    );
  }
  const groupIds = new Map<string, string>();
  for (const group of plan.groups) {
    groupIds.set(
      group.name,
      await ensureGroup(
        group.name,
        group.members.map((m) => principals.get(m)!.objectId),
        group.roleAssignable,
      ),
    );
  }
  for (const lock of plan.locks) {
    const group = lock.scope.split("/resourceGroups/")[1]!;
    await az(
      "lock",
      "create",
      "--name",
      "sbinbox-no-delete",
      "--lock-type",
      lock.level,
      "--resource-group",
      group,
      "--output",
      "none",
    );
  }
  return groupIds;
}

/** Reads the environment back: a reviewed environment an administrator could deploy to unreviewed is refused. */
async function checkNoAdminBypass(repo: string, name: string): Promise<void> {
  const read = JSON.parse(await run("gh", ["api", `repos/${repo}/environments/${name}`])) as {
    can_admins_bypass?: unknown;
  };
  if (read.can_admins_bypass !== false) {
    throw new Error(
      `AdminBypassEnabled: GitHub environment ${name} reads back can_admins_bypass=${String(read.can_admins_bypass)}; ` +
        "administrators could deploy without a review (set it off under Settings > Environments and rerun)",
    );
  }
}

async function applyGithub(
  plan: EnvironmentPlan,
  repo: string,
  reviewers: number[],
  values: (source: string) => string,
): Promise<void> {
  for (const environment of plan.githubEnvironments) {
    const body = {
      prevent_self_review: true,
      reviewers: environment.requiresReviewer ? reviewers.map((id) => ({ type: "User", id })) : [],
      deployment_branch_policy: { protected_branches: false, custom_branch_policies: true },
      // Administrators bypass an environment's protection rules unless this is false (GitHub's default is true).
      ...(environment.requiresReviewer ? { can_admins_bypass: false } : {}),
    };
    await run(
      "gh",
      ["api", "--method", "PUT", `repos/${repo}/environments/${environment.name}`, "--input", "-"],
      JSON.stringify(body),
    );
    if (environment.requiresReviewer) await checkNoAdminBypass(repo, environment.name);
    const policies = await run("gh", [
      "api",
      `repos/${repo}/environments/${environment.name}/deployment-branch-policies`,
      "--jq",
      ".branch_policies[].name",
    ]);
    if (!policies.split("\n").includes(environment.branch)) {
      await run("gh", [
        "api",
        "--method",
        "POST",
        `repos/${repo}/environments/${environment.name}/deployment-branch-policies`,
        "-f",
        `name=${environment.branch}`,
        "-f",
        "type=branch",
      ]);
    }
    for (const [name, source] of Object.entries(environment.secrets)) {
      await run("gh", [
        "secret",
        "set",
        name,
        "--repo",
        repo,
        "--env",
        environment.name,
        "--body",
        values(source),
      ]);
    }
  }
}

async function restrictRunnerGroup(plan: EnvironmentPlan, owner: string, repoId: number): Promise<void> {
  if (plan.runnerGroup === undefined) return;
  const id = await run("gh", [
    "api",
    `orgs/${owner}/actions/runner-groups`,
    "--jq",
    `.runner_groups[] | select(.name == "${plan.runnerGroup.name}") | .id`,
  ]);
  if (id === "")
    throw new Error(
      `no runner group "${plan.runnerGroup.name}" in ${owner}: create it first (docs/deploy.md)`,
    );
  const body = {
    visibility: "selected",
    restricted_to_workflows: true,
    selected_workflows: plan.runnerGroup.selectedWorkflows,
  };
  await run(
    "gh",
    ["api", "--method", "PATCH", `orgs/${owner}/actions/runner-groups/${id}`, "--input", "-"],
    JSON.stringify(body),
  );
  await run("gh", [
    "api",
    "--method",
    "PUT",
    `orgs/${owner}/actions/runner-groups/${id}/repositories/${repoId}`,
  ]);
  await checkRunnerGroup(plan.runnerGroup, owner, id);
}

/**
 * Reads the group back. Restricting a group to selected workflows is a GitHub Enterprise Cloud feature
 * (docs/deploy.md, "Prerequisites"): elsewhere the group would still admit every workflow of the repository, so the
 * bootstrap stops by name unless GitHub reports the restriction and exactly the deploy workflow.
 */
async function checkRunnerGroup(
  group: NonNullable<EnvironmentPlan["runnerGroup"]>,
  owner: string,
  id: string,
): Promise<void> {
  const read = JSON.parse(await run("gh", ["api", `orgs/${owner}/actions/runner-groups/${id}`])) as {
    restricted_to_workflows?: unknown;
    selected_workflows?: unknown;
  };
  const workflows = Array.isArray(read.selected_workflows) ? read.selected_workflows : [];
  const expected = [...group.selectedWorkflows];
  if (
    read.restricted_to_workflows !== true ||
    workflows.length !== expected.length ||
    !expected.every((w) => workflows.includes(w))
  ) {
    throw new Error(
      `RunnerGroupNotRestricted: runner group "${group.name}" reads back restricted_to_workflows=` +
        `${String(read.restricted_to_workflows)}, selected_workflows=${JSON.stringify(workflows)}; expected only ` +
        `${expected.join(", ")} (restricting a group to workflows needs GitHub Enterprise Cloud)`,
    );
  }
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      repo: { type: "string" },
      subscription: { type: "string" },
      location: { type: "string", default: "northeurope" },
      environment: { type: "string", multiple: true },
      reviewer: { type: "string", multiple: true },
      "runner-group": { type: "string" },
      "operator-group": { type: "string", multiple: true },
      "role-assignable-groups": { type: "boolean", default: false },
      branch: { type: "string", default: "main" },
      "dry-run": { type: "boolean", default: false },
    },
    strict: true,
  });
  const [owner, name, extra] = (values.repo ?? "").split("/");
  if (!owner || !name || extra !== undefined) throw new Error("--repo OWNER/REPO is required");
  if (!values.subscription) throw new Error("--subscription <subscription id> is required");
  const reviewers = (values.reviewer ?? []).map((r) => {
    if (!/^\d+$/.test(r))
      throw new Error(`--reviewer takes a GitHub user's numeric id (gh api users/NAME --jq .id), got "${r}"`);
    return Number(r);
  });
  const operatorGroups: Record<string, string[]> = {};
  for (const entry of values["operator-group"] ?? []) {
    const [environment, id] = entry.split("=");
    if (!environment || !id)
      throw new Error(`--operator-group takes <environment>=<group object id>, got "${entry}"`);
    (operatorGroups[environment] ??= []).push(id);
  }
  const { repository, customization, organizationKeys } = await readRepository(owner, name, (path) =>
    run("gh", ["api", path]),
  );
  const plan = environmentPlan({
    repository,
    customization,
    organizationKeys,
    subscriptionId: values.subscription,
    location: values.location,
    environments: values.environment ?? ["dev", "prod"],
    privateEnvironments: ["prod"],
    lockedEnvironments: ["prod"],
    reviewedEnvironments: ["prod"],
    branch: values.branch,
    runnerGroup: values["runner-group"],
    // prod's SQL admin group only: dev's stays a plain group its team can manage.
    roleAssignableGroups: values["role-assignable-groups"] ? ["prod"] : [],
    operatorGroups,
  });
  if (values["dry-run"]) {
    process.stdout.write(`${JSON.stringify(plan, null, 2)}\n`);
    return 0;
  }
  const unreviewed = plan.githubEnvironments.find((e) => e.requiresReviewer);
  if (unreviewed && reviewers.length === 0) {
    throw new Error(`environment ${unreviewed.name} requires a reviewer: give --reviewer <GitHub user id>`);
  }
  const principals = new Map<string, Principal>();
  const groupIds = await applyAzure(plan, principals);
  const tenant = await az("account", "show", "--query", "tenantId", "--output", "tsv");
  const valueOf = (source: string): string => {
    const [, kind, target] = /^(client id|object id) of (.+)$/.exec(source) ?? [];
    if (source === "tenant id") return tenant;
    if (kind === "client id") return principals.get(target!)!.appId;
    if (kind === "object id") return principals.get(target!)?.objectId ?? groupIds.get(target!)!;
    return source;
  };
  await applyGithub(plan, `${owner}/${name}`, reviewers, valueOf);
  await restrictRunnerGroup(plan, owner, repository.repoId);
  process.stdout.write(
    `done: ${plan.identities.length} identities, ${plan.roleAssignments.length} role assignments, ` +
      `${plan.groups.map((g) => g.name).join(", ")}; ${DEPLOY_WORKFLOW} deploys from ${values.branch}\n`,
  );
  return 0;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`environment-identities: ${(error as Error).message}\n`);
  process.exitCode = 2;
}
