import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import {
  OPERATOR_ROLES,
  roleAssignmentCondition,
  SERVICE_ROLES,
  TEMPLATE_ROLES,
} from "../../scripts/rbac-condition.ts";
import { compileTemplate, obj, ofType, props, str, type JsonObject } from "./arm.ts";

const run = promisify(execFile);

describe("the deploy identity's ABAC condition (scripts/rbac-condition.ts)", function () {
  this.timeout(120_000);
  let main: JsonObject;

  before(async function () {
    main = await compileTemplate("infra/main.bicep");
  });

  it("lists exactly the roles the compiled templates assign", function () {
    const assigned = new Set<string>();
    for (const assignment of ofType(main, "Microsoft.Authorization/roleAssignments")) {
      const variable = /variables\('(\w+)'\)/.exec(str(props(assignment).roleDefinitionId))?.[1];
      assert.ok(variable, str(props(assignment).roleDefinitionId));
      assigned.add(str(obj(assignment.template.variables, "variables")[variable], variable));
    }
    assert.deepEqual([...assigned].sort(), Object.values(TEMPLATE_ROLES).sort());
  });

  it("pairs the worker's roles with service principals and the operator roles with the listed groups, in Microsoft's form", function () {
    const group = "00000000-0000-4000-8000-0000000000a1";
    const condition = roleAssignmentCondition([group]);
    const service = (source: string) =>
      `(@${source}[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals ` +
      `{${Object.values(SERVICE_ROLES).join(", ")}} AND ` +
      `@${source}[Microsoft.Authorization/roleAssignments:PrincipalType] ForAnyOfAnyValues:StringEqualsIgnoreCase {'ServicePrincipal'})`;
    const operators = (source: string) =>
      `(@${source}[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals ` +
      `{${Object.values(OPERATOR_ROLES).join(", ")}} AND ` +
      `@${source}[Microsoft.Authorization/roleAssignments:PrincipalType] ForAnyOfAnyValues:StringEqualsIgnoreCase {'Group'} AND ` +
      `@${source}[Microsoft.Authorization/roleAssignments:PrincipalId] ForAnyOfAnyValues:GuidEquals {${group}})`;
    assert.equal(
      condition,
      `((!(ActionMatches{'Microsoft.Authorization/roleAssignments/write'})) OR (${service("Request")} OR ${operators("Request")})) AND ` +
        `((!(ActionMatches{'Microsoft.Authorization/roleAssignments/delete'})) OR (${service("Resource")} OR ${operators("Resource")}))`,
    );
    // Without operator groups, no operator-only role (Blob Data Contributor, VM User Login, Reader) may be granted.
    const none = roleAssignmentCondition();
    for (const role of ["Storage Blob Data Contributor", "Virtual Machine User Login", "Reader"])
      assert.doesNotMatch(none, new RegExp(TEMPLATE_ROLES[role]!), role);
    assert.doesNotMatch(none, /'Group'|'User'|PrincipalId/);
    assert.equal(
      none,
      `((!(ActionMatches{'Microsoft.Authorization/roleAssignments/write'})) OR ${service("Request")}) AND ` +
        `((!(ActionMatches{'Microsoft.Authorization/roleAssignments/delete'})) OR ${service("Resource")})`,
    );
    // A user is never a principal type an assignment may have; a group not listed is not admitted by id.
    assert.doesNotMatch(condition, /'User'/);
    assert.throws(
      () => roleAssignmentCondition(["not-a-guid"]),
      /operator group "not-a-guid" is not an Entra ID object id/,
    );
  });

  it("decides as Azure would: worker roles to service principals, operator roles to the listed groups only", function () {
    const group = "00000000-0000-4000-8000-0000000000a1";
    const other = "00000000-0000-4000-8000-0000000000b2";
    const condition = roleAssignmentCondition([group]);
    const sender = SERVICE_ROLES["Azure Service Bus Data Sender"]!;
    const blob = OPERATOR_ROLES["Storage Blob Data Contributor"]!;
    const cases: [string, string, string, string, boolean][] = [
      ["write", sender, "ServicePrincipal", other, true],
      ["write", sender, "User", other, false],
      ["write", sender, "Group", other, false],
      ["write", sender, "Group", group, true],
      ["write", SERVICE_ROLES["Monitoring Metrics Publisher"]!, "Group", group, false],
      ["write", blob, "Group", group, true],
      ["write", blob, "Group", other, false],
      ["write", blob, "ServicePrincipal", other, false],
      ["write", blob, "User", group, false],
      ["write", OPERATOR_ROLES.Reader!, "User", other, false],
      ["write", "8e3af657-a8ff-443c-a75c-2fe8c4bcb635", "ServicePrincipal", other, false], // Owner
      ["delete", blob, "Group", group, true],
      ["delete", blob, "Group", other, false],
      ["delete", OPERATOR_ROLES["Virtual Machine User Login"]!, "User", other, false],
    ];
    for (const [action, role, type, id, expected] of cases)
      assert.equal(
        evaluate(condition, action, { RoleDefinitionId: role, PrincipalType: type, PrincipalId: id }),
        expected,
        `${action} ${role} to ${type} ${id}`,
      );
    // Without groups: no operator role to anyone; worker roles still to service principals.
    assert.equal(
      evaluate(roleAssignmentCondition(), "write", {
        RoleDefinitionId: blob,
        PrincipalType: "Group",
        PrincipalId: group,
      }),
      false,
    );
    assert.equal(
      evaluate(roleAssignmentCondition(), "write", {
        RoleDefinitionId: sender,
        PrincipalType: "ServicePrincipal",
        PrincipalId: other,
      }),
      true,
    );
  });

  it("prints the condition for the template roles when run", async function () {
    const group = "00000000-0000-4000-8000-0000000000a1";
    const { stdout } = await run(process.execPath, ["scripts/rbac-condition.ts", group]);
    assert.equal(stdout, `${roleAssignmentCondition([group])}\n`);
    for (const id of Object.values(TEMPLATE_ROLES)) assert.match(stdout, new RegExp(id));
  });
});

/**
 * Evaluates a condition of the grammar roleAssignmentCondition writes (ActionMatches, !, AND, OR, parentheses,
 * ForAnyOfAnyValues:GuidEquals / StringEqualsIgnoreCase against one attribute value) for one action; the attribute
 * is read from the request on a write and from the existing assignment on a delete, as Azure does.
 */
function evaluate(condition: string, action: string, attributes: Record<string, string>): boolean {
  const tokens = condition.match(
    /ActionMatches\{'[^']*'\}|@\w+\[[^\]]*\] ForAnyOfAnyValues:\w+ \{[^}]*\}|\(|\)|!|AND|OR/g,
  )!;
  assert.equal(
    tokens.join("").replace(/\s/g, ""),
    condition.replace(/\s/g, ""),
    "every part of the condition is understood",
  );
  let at = 0;
  const source = action === "write" ? "Request" : "Resource";
  // `live` false: a branch the operators' short-circuit skips (the delete's guard on a write) is read, not evaluated.
  const primary = (live: boolean): boolean => {
    const token = tokens[at++]!;
    if (token === "(") {
      const value = or(live);
      assert.equal(tokens[at++], ")");
      return value;
    }
    if (token === "!") return !primary(live);
    const matches = /^ActionMatches\{'Microsoft\.Authorization\/roleAssignments\/(\w+)'\}$/.exec(token);
    if (matches) return matches[1] === action;
    const [, from, name, operator, list] =
      /^@(\w+)\[Microsoft\.Authorization\/roleAssignments:(\w+)\] ForAnyOfAnyValues:(\w+) \{(.*)\}$/.exec(
        token,
      )!;
    if (!live) return false;
    assert.equal(from, source, `${token} on a ${action}`);
    const values = list!.split(", ").map((v) => v.replace(/^'|'$/g, "").toLowerCase());
    assert.ok(operator === "GuidEquals" || operator === "StringEqualsIgnoreCase", operator);
    return values.includes(attributes[name!]!.toLowerCase());
  };
  const and = (live: boolean): boolean => {
    let value = primary(live);
    while (tokens[at] === "AND") {
      at++;
      value = primary(live && value) && value;
    }
    return value;
  };
  const or = (live: boolean): boolean => {
    let value = and(live);
    while (tokens[at] === "OR") {
      at++;
      value = and(live && !value) || value;
    }
    return value;
  };
  const result = or(true);
  assert.equal(at, tokens.length);
  return result;
}
