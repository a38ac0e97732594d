import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { roleAssignmentCondition, TEMPLATE_ROLES } from "../../scripts/rbac-condition.ts";
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

  it("allows writes and deletes of those roles to the principal types named, in Microsoft's form", function () {
    const condition = roleAssignmentCondition(["a-1", "b-2"], ["ServicePrincipal"]);
    assert.equal(
      condition,
      "((!(ActionMatches{'Microsoft.Authorization/roleAssignments/write'})) OR " +
        "(@Request[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals {a-1, b-2} AND " +
        "@Request[Microsoft.Authorization/roleAssignments:PrincipalType] ForAnyOfAnyValues:StringEqualsIgnoreCase {'ServicePrincipal'})) AND " +
        "((!(ActionMatches{'Microsoft.Authorization/roleAssignments/delete'})) OR " +
        "(@Resource[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals {a-1, b-2} AND " +
        "@Resource[Microsoft.Authorization/roleAssignments:PrincipalType] ForAnyOfAnyValues:StringEqualsIgnoreCase {'ServicePrincipal'}))",
    );
    assert.throws(() => roleAssignmentCondition([]), /no role ids/);
    // By default: service principals, and the groups and users the console's operators are (dlqReaders, dlqOperators).
    assert.match(
      roleAssignmentCondition(["a-1"]),
      /PrincipalType\] ForAnyOfAnyValues:StringEqualsIgnoreCase \{'ServicePrincipal', 'Group', 'User'\}\)\)$/,
    );
  });

  it("prints the condition for the template roles when run", async function () {
    const { stdout } = await run(process.execPath, ["scripts/rbac-condition.ts"]);
    assert.equal(stdout, `${roleAssignmentCondition()}\n`);
    for (const id of Object.values(TEMPLATE_ROLES)) assert.match(stdout, new RegExp(id));
  });
});
