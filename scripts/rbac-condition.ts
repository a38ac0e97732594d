/**
 * The ABAC condition for the deploy identity's Role Based Access Control Administrator assignment: it may create
 * and delete role assignments of the roles the templates assign, to service principals (the worker's managed
 * identity, publishers' and the relay's identities) and to the groups and users the DLQ console's operators are,
 * and nothing else. The form is Microsoft's "Example: Constrain
 * roles and principal types" (Delegate Azure role assignment management to others with conditions): the write is
 * checked on the request, the delete on the existing assignment. `node scripts/rbac-condition.ts` prints it for
 * `az role assignment create --condition ... --condition-version 2.0` (docs/deploy.md).
 */
import { fileURLToPath } from "node:url";

/** Every role the Bicep assigns (test/infra/rbac-condition.test.ts compares this with the compiled templates). */
export const TEMPLATE_ROLES: Readonly<Record<string, string>> = {
  "Azure Service Bus Data Receiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
  "Azure Service Bus Data Sender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
  "Monitoring Metrics Publisher": "3913510d-42f4-4e42-8a64-420c390055eb",
  // The DLQ console's operators (dlqReaders, dlqOperators) and, with operatorAccess, their jump VM.
  "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
  "Virtual Machine User Login": "fb879df8-f326-4884-b1cf-06f3ad86be52",
  Reader: "acdd72a7-3385-48ef-bd42-f606fba81ae7",
};

export function roleAssignmentCondition(
  roleIds: readonly string[] = Object.values(TEMPLATE_ROLES),
  // Groups and users: the console's operators are people (docs/operations.md, "Signed-in operators in Azure").
  principalTypes: readonly string[] = ["ServicePrincipal", "Group", "User"],
): string {
  if (roleIds.length === 0) throw new Error("no role ids: the condition would allow no assignment at all");
  const roles = `{${roleIds.join(", ")}}`;
  const types = `{${principalTypes.map((t) => `'${t}'`).join(", ")}}`;
  const guard = (action: string, source: "Request" | "Resource") =>
    `((!(ActionMatches{'Microsoft.Authorization/roleAssignments/${action}'})) OR ` +
    `(@${source}[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals ${roles} AND ` +
    `@${source}[Microsoft.Authorization/roleAssignments:PrincipalType] ForAnyOfAnyValues:StringEqualsIgnoreCase ${types}))`;
  return `${guard("write", "Request")} AND ${guard("delete", "Resource")}`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  process.stdout.write(`${roleAssignmentCondition()}\n`);
}
