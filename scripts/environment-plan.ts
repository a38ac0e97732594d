/**
 * What one bootstrap makes for each environment, as data: its resource group, two identities with separate duties,
 * their federated credentials, their role assignments (each scoped to that environment's resource group), the SQL
 * admin group (the app identity its only member), the GitHub environments that guard them, and for prod a delete
 * lock. scripts/environment-identities.ts carries it out with `az` and `gh`; test/infra/environment-plan.test.ts
 * computes from it that no identity of one environment has a right on another's resources.
 *
 * The duties (docs/deploy.md, "The pipeline's rights"):
 * - `infra` (GitHub environment `<env>`): deploys the Bicep. Contributor, and Role Based Access Control
 *   Administrator limited by scripts/rbac-condition.ts, on the resource group. Runs none of the artifact's code.
 * - `app` (GitHub environment `<env>-app`): runs the artifact (`sbinbox migrate`, the first message) and ships it.
 *   Member of the SQL admin group; a custom role on the resource group with only what the zip deploy needs
 *   (deployRoleActions: read the site, publish to it, restart it; not Website Contributor, whose
 *   Microsoft.Web/sites/* could reopen the site's network access or approve a private endpoint connection, and whose
 *   Microsoft.Resources/deployments/* could deploy a template), Reader for the first message's check; on a public
 *   environment, a custom role for the temporary SQL firewall rule. No role-assignment right at all.
 */
import { roleAssignmentCondition } from "./rbac-condition.ts";
import {
  credentialName,
  githubEnvironmentSubject,
  type Repository,
  type SubjectCustomization,
} from "./oidc-subject.ts";

export type Duty = "infra" | "app";

export interface PlanInput {
  readonly repository: Repository;
  readonly customization: SubjectCustomization;
  readonly organizationKeys?: readonly string[];
  readonly subscriptionId: string;
  /** The resource groups' region: every resource of the environment goes there (main.bicep reads it). */
  readonly location: string;
  readonly environments: readonly string[];
  /** Environments on the private network (no SQL firewall rule, so no firewall role). */
  readonly privateEnvironments: readonly string[];
  /** Environments whose resource group gets a CanNotDelete lock. */
  readonly lockedEnvironments: readonly string[];
  /** Environments whose GitHub environments require a reviewer (the reviewers are given at apply time). */
  readonly reviewedEnvironments: readonly string[];
  /** The branch every environment deploys from. */
  readonly branch: string;
  /**
   * Environments whose SQL admin group is created role-assignable (isAssignableToRole: Entra ID P1, created by a
   * Privileged Role Administrator), so Groups and User Administrators can no longer change its members.
   */
  readonly roleAssignableGroups?: readonly string[];
  /**
   * Per environment, the DLQ console's operator groups (object ids) its deploy identity may grant the operator
   * roles to (scripts/rbac-condition.ts); none: no operator role can be assigned there.
   */
  readonly operatorGroups?: Readonly<Record<string, readonly string[]>>;
  /** An organization runner group (the VNet runner's) to restrict to the deploy workflow on the branch. */
  readonly runnerGroup?: string;
}

export interface PlannedIdentity {
  /** Display name of the app registration. */
  readonly name: string;
  readonly environment: string;
  readonly duty: Duty;
  /** The GitHub environment whose jobs sign in as it. */
  readonly githubEnvironment: string;
  readonly subject: string;
  readonly credentialName: string;
}

export interface PlannedRoleAssignment {
  /** The identity's name. */
  readonly principal: string;
  readonly role: string;
  readonly scope: string;
  readonly condition?: string;
}

export interface PlannedGroup {
  readonly name: string;
  readonly environment: string;
  readonly members: readonly string[];
  readonly roleAssignable: boolean;
}

export interface PlannedGithubEnvironment {
  readonly name: string;
  readonly branch: string;
  readonly requiresReviewer: boolean;
  /** Secret name to the value's source (an identity's client id, a group's object id, ...). */
  readonly secrets: Readonly<Record<string, string>>;
}

export interface PlannedCustomRole {
  readonly name: string;
  readonly description: string;
  readonly actions: readonly string[];
  readonly assignableScope: string;
}

export interface EnvironmentPlan {
  readonly resourceGroups: readonly { name: string; id: string; location: string }[];
  readonly identities: readonly PlannedIdentity[];
  readonly customRoles: readonly PlannedCustomRole[];
  readonly roleAssignments: readonly PlannedRoleAssignment[];
  readonly groups: readonly PlannedGroup[];
  readonly locks: readonly { scope: string; level: "CanNotDelete" }[];
  readonly githubEnvironments: readonly PlannedGithubEnvironment[];
  readonly runnerGroup?: { readonly name: string; readonly selectedWorkflows: readonly string[] };
}

export const DEPLOY_WORKFLOW = ".github/workflows/deploy.yml";

export function resourceGroupName(environment: string): string {
  return `rg-sbinbox-${environment}`;
}

export function resourceGroupId(subscriptionId: string, environment: string): string {
  return `/subscriptions/${subscriptionId}/resourceGroups/${resourceGroupName(environment)}`;
}

export function identityName(environment: string, duty: Duty): string {
  return `sbinbox-${environment}-${duty}`;
}

export function sqlAdminGroupName(environment: string): string {
  return `sbinbox-${environment}-sql-admins`;
}

export function githubEnvironmentName(environment: string, duty: Duty): string {
  return duty === "infra" ? environment : `${environment}-app`;
}

export function firewallRoleName(environment: string): string {
  return `sbinbox SQL firewall rules (${resourceGroupName(environment)})`;
}

export function deployRoleName(environment: string): string {
  return `sbinbox worker deploy (${resourceGroupName(environment)})`;
}

/**
 * What `az webapp deploy --type zip` (OneDeploy through Kudu with an Entra token), the readiness check's
 * `az webapp show` and a restart need of the site, and nothing that writes it: no Microsoft.Web/sites/write or
 * sites/config/write (network access, access restrictions, settings), no private endpoint connection, no
 * Microsoft.Resources/deployments, no Microsoft.Authorization. Names from Microsoft's resource provider operations
 * list (docs/deploy.md, "The pipeline's rights").
 */
export const deployRoleActions = [
  "Microsoft.Web/sites/read",
  "Microsoft.Web/sites/publish/Action",
  "Microsoft.Web/sites/restart/Action",
  "Microsoft.Web/sites/deploymentStatus/read",
  "Microsoft.Web/sites/deployments/read",
] as const;

function checkNames(input: PlanInput): void {
  if (input.environments.length === 0) throw new Error("no environment to plan");
  const all = new Set(input.environments);
  for (const environment of input.environments) {
    if (!/^[a-z0-9][a-z0-9-]{0,15}$/.test(environment)) {
      throw new Error(`environment "${environment}": use 1-16 lower-case letters, digits and '-'`);
    }
    // prod's app environment is named prod-app: an environment of that name would share its credentials' subject.
    if (environment.endsWith("-app") && all.has(environment.slice(0, -"-app".length))) {
      throw new Error(
        `environment "${environment}" collides with the app environment of "${environment.slice(0, -4)}"`,
      );
    }
  }
}

function identitiesOf(input: PlanInput, environment: string): PlannedIdentity[] {
  return (["infra", "app"] as const).map((duty) => {
    const githubEnvironment = githubEnvironmentName(environment, duty);
    const subject = githubEnvironmentSubject(
      input.repository,
      input.customization,
      githubEnvironment,
      input.organizationKeys,
    );
    return {
      name: identityName(environment, duty),
      environment,
      duty,
      githubEnvironment,
      subject,
      credentialName: credentialName(input.repository, githubEnvironment, subject),
    };
  });
}

function rolesOf(input: PlanInput, environment: string): PlannedRoleAssignment[] {
  const scope = resourceGroupId(input.subscriptionId, environment);
  const infra = identityName(environment, "infra");
  const app = identityName(environment, "app");
  const roles: PlannedRoleAssignment[] = [
    { principal: infra, role: "Contributor", scope },
    {
      principal: infra,
      role: "Role Based Access Control Administrator",
      scope,
      condition: roleAssignmentCondition(input.operatorGroups?.[environment] ?? []),
    },
    { principal: app, role: deployRoleName(environment), scope },
    // The queue's counts, which the first message's check reads (infra/scripts/first-message.sh).
    { principal: app, role: "Reader", scope },
  ];
  if (!input.privateEnvironments.includes(environment)) {
    roles.push({ principal: app, role: firewallRoleName(environment), scope });
  }
  return roles;
}

function customRolesOf(input: PlanInput, environment: string): PlannedCustomRole[] {
  const assignableScope = resourceGroupId(input.subscriptionId, environment);
  const roles: PlannedCustomRole[] = [
    {
      name: deployRoleName(environment),
      description: "Read the worker's site, zip-deploy to it (OneDeploy) and restart it; change nothing else",
      actions: [...deployRoleActions],
      assignableScope,
    },
  ];
  if (!input.privateEnvironments.includes(environment)) {
    roles.push({
      name: firewallRoleName(environment),
      description: "Read the SQL server and manage its firewall rules (post-provision's temporary rule)",
      actions: ["Microsoft.Sql/servers/read", "Microsoft.Sql/servers/firewallRules/*"],
      assignableScope,
    });
  }
  return roles;
}

export function environmentPlan(input: PlanInput): EnvironmentPlan {
  checkNames(input);
  const envs = input.environments;
  // The form of GitHub's own example (`.../deploy.yml@main`: "pin the workflow to a branch, tag, or full SHA").
  const workflow = `${input.repository.owner}/${input.repository.repo}/${DEPLOY_WORKFLOW}@${input.branch}`;
  return {
    resourceGroups: envs.map((environment) => ({
      name: resourceGroupName(environment),
      id: resourceGroupId(input.subscriptionId, environment),
      location: input.location,
    })),
    identities: envs.flatMap((environment) => identitiesOf(input, environment)),
    customRoles: envs.flatMap((environment) => customRolesOf(input, environment)),
    roleAssignments: envs.flatMap((environment) => rolesOf(input, environment)),
    groups: envs.map((environment) => ({
      name: sqlAdminGroupName(environment),
      environment,
      members: [identityName(environment, "app")],
      roleAssignable: (input.roleAssignableGroups ?? []).includes(environment),
    })),
    locks: envs
      .filter((environment) => input.lockedEnvironments.includes(environment))
      .map((environment) => ({
        scope: resourceGroupId(input.subscriptionId, environment),
        level: "CanNotDelete",
      })),
    githubEnvironments: envs.flatMap((environment) =>
      (["infra", "app"] as const).map((duty): PlannedGithubEnvironment => ({
        name: githubEnvironmentName(environment, duty),
        branch: input.branch,
        requiresReviewer: input.reviewedEnvironments.includes(environment),
        secrets:
          duty === "infra"
            ? {
                AZURE_CLIENT_ID: `client id of ${identityName(environment, "infra")}`,
                AZURE_TENANT_ID: "tenant id",
                AZURE_SUBSCRIPTION_ID: input.subscriptionId,
                SQL_ADMIN_LOGIN: sqlAdminGroupName(environment),
                SQL_ADMIN_OBJECT_ID: `object id of ${sqlAdminGroupName(environment)}`,
                APP_PRINCIPAL_ID: `object id of ${identityName(environment, "app")}`,
              }
            : {
                AZURE_CLIENT_ID: `client id of ${identityName(environment, "app")}`,
                AZURE_TENANT_ID: "tenant id",
                AZURE_SUBSCRIPTION_ID: input.subscriptionId,
              },
      })),
    ),
    ...(input.runnerGroup === undefined
      ? {}
      : { runnerGroup: { name: input.runnerGroup, selectedWorkflows: [workflow] } }),
  };
}

/** Whether a role assigned at `scope` applies to the resource `resourceId` (the scope or anything below it). */
export function scopeCovers(scope: string, resourceId: string): boolean {
  const s = scope.toLowerCase().replace(/\/+$/, "");
  const r = resourceId.toLowerCase().replace(/\/+$/, "");
  return r === s || r.startsWith(`${s}/`);
}
