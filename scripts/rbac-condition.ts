/**
 * The ABAC condition for the deploy identity's Role Based Access Control Administrator assignment: it may create
 * and delete assignments of the worker's roles to service principals (the worker's managed identity, publishers'
 * and the relay's identities), and of the DLQ console's operator roles to the listed operator groups only, and
 * nothing else. Each role set is paired with its principals, so a worker role cannot go to a person and an operator
 * role cannot go to any group but those listed. The form is Microsoft's "Example: Constrain roles and principal
 * types" for the first and "Example: Constrain roles and specific groups" for the second (Delegate Azure role
 * assignment management to others with conditions): the write is checked on the request, the delete on the
 * existing assignment. `node scripts/rbac-condition.ts [operator group object id ...]` prints it for
 * `az role assignment create|update --condition ... --condition-version 2.0` (docs/deploy.md).
 */
import { fileURLToPath } from "node:url";

/** The worker's roles: to service principals only (the worker, publishers, the relay). */
export const SERVICE_ROLES: Readonly<Record<string, string>> = {
  "Azure Service Bus Data Receiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
  "Azure Service Bus Data Sender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
  "Monitoring Metrics Publisher": "3913510d-42f4-4e42-8a64-420c390055eb",
};

/** The DLQ console operators' roles (dlqReaders, dlqOperators; with operatorAccess the jump VM's): to listed groups. */
export const OPERATOR_ROLES: Readonly<Record<string, string>> = {
  "Azure Service Bus Data Receiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
  "Azure Service Bus Data Sender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
  "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
  "Virtual Machine User Login": "fb879df8-f326-4884-b1cf-06f3ad86be52",
  Reader: "acdd72a7-3385-48ef-bd42-f606fba81ae7",
};

/** Every role the Bicep assigns (test/infra/rbac-condition.test.ts compares this with the compiled templates). */
export const TEMPLATE_ROLES: Readonly<Record<string, string>> = { ...SERVICE_ROLES, ...OPERATOR_ROLES };

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The condition: the worker's roles to service principals; with operator groups, the operator roles to those groups
 * (object ids: DLQ_READER_GROUP_IDS and DLQ_OPERATOR_GROUP_IDS of the environment). Without groups no operator role
 * may be assigned at all, and an operator role's assignment to a user is never allowed (operators are groups).
 */
export function roleAssignmentCondition(operatorGroupIds: readonly string[] = []): string {
  for (const id of operatorGroupIds)
    if (!GUID.test(id)) throw new Error(`operator group "${id}" is not an Entra ID object id (a GUID)`);
  const set = (ids: readonly string[]) => `{${[...new Set(ids)].join(", ")}}`;
  const allowed = (source: "Request" | "Resource") => {
    const attribute = (name: string) => `@${source}[Microsoft.Authorization/roleAssignments:${name}]`;
    const service =
      `(${attribute("RoleDefinitionId")} ForAnyOfAnyValues:GuidEquals ${set(Object.values(SERVICE_ROLES))} AND ` +
      `${attribute("PrincipalType")} ForAnyOfAnyValues:StringEqualsIgnoreCase {'ServicePrincipal'})`;
    if (operatorGroupIds.length === 0) return service;
    const operators =
      `(${attribute("RoleDefinitionId")} ForAnyOfAnyValues:GuidEquals ${set(Object.values(OPERATOR_ROLES))} AND ` +
      `${attribute("PrincipalType")} ForAnyOfAnyValues:StringEqualsIgnoreCase {'Group'} AND ` +
      `${attribute("PrincipalId")} ForAnyOfAnyValues:GuidEquals ${set(operatorGroupIds)})`;
    return `(${service} OR ${operators})`;
  };
  const guard = (action: string, source: "Request" | "Resource") =>
    `((!(ActionMatches{'Microsoft.Authorization/roleAssignments/${action}'})) OR ${allowed(source)})`;
  return `${guard("write", "Request")} AND ${guard("delete", "Resource")}`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  process.stdout.write(`${roleAssignmentCondition(process.argv.slice(2))}\n`);
}
