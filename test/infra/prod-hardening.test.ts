/**
 * What prod turns on beyond the private network, asserted on the ARM JSON the pinned Bicep CLI compiles: the
 * resource-group scope, the named failure when alerts would notify nobody, the audit retention, the workspace's
 * shared keys off, zone redundancy, a database that never pauses, Defender for SQL, and no unused server identity.
 * Prod's parameter file is built to show it selects each.
 */
import assert from "node:assert/strict";
import {
  compileParameters,
  compileTemplate,
  obj,
  parameterDefault,
  props,
  runBicepShared,
  single,
  str,
  type Json,
  type JsonObject,
} from "./arm.ts";

describe("prod's hardening in infra/main.bicep, compiled to ARM JSON by the pinned Bicep CLI", function () {
  this.timeout(120_000);
  let main: JsonObject;
  let prod: JsonObject;
  const prodValue = (name: string): Json | undefined => obj(prod[name], name).value;
  const moduleParam = (module: string, name: string): Json | undefined => {
    const m = obj(obj(main.resources, "resources")[module], module);
    const value = obj(obj(m.properties, "properties").parameters, `${module} parameters`)[name];
    return obj(value, `${module}.${name}`).value;
  };
  const variable = (name: string) => str(obj(main.variables, "variables")[name], name);

  before(async function () {
    main = await compileTemplate("infra/main.bicep");
    prod = obj((await compileParameters("infra/main.prod.bicepparam")).parameters, "parameters");
  });

  it("deploys into a resource group it does not create, so the deploy identity needs rights on that group only", function () {
    assert.match(str(main.$schema), /\/deploymentTemplate\.json#$/, "a resource-group template");
    assert.equal(
      single(main, "Microsoft.Web/sites").type,
      "Microsoft.Web/sites",
      "resources are still nested in modules",
    );
    const text = JSON.stringify(main);
    assert.doesNotMatch(text, /"Microsoft\.Resources\/resourceGroups"/);
    assert.doesNotMatch(text, /subscriptionDeploymentTemplate/);
    assert.equal(parameterDefault(main, "location"), "[resourceGroup().location]");
    assert.equal(
      obj(obj(main.outputs, "outputs").AZURE_RESOURCE_GROUP, "output").value,
      "[resourceGroup().name]",
    );
  });

  it("fails a deployment that requires alert routing with a named error unless alerts reach someone", function () {
    assert.equal(parameterDefault(main, "requireAlertRouting"), false);
    assert.equal(prodValue("requireAlertRouting"), true);
    assert.equal(
      variable("alertRouted"),
      "[or(not(empty(parameters('alertEmail'))), not(empty(parameters('alertActionGroupId'))))]",
    );
    assert.equal(
      variable("runbookAbsolute"),
      "[startsWith(toLower(parameters('alertRunbookUrl')), 'https://')]",
    );
    const checked = variable("checkedRunbookUrl");
    // ARM evaluates fail() only on the branch taken: without routing, then without an absolute URL.
    assert.match(
      checked,
      /^\[if\(not\(parameters\('requireAlertRouting'\)\), parameters\('alertRunbookUrl'\), if\(not\(variables\('alertRouted'\)\), fail\('AlertRoutingMissing: /,
    );
    assert.match(
      checked,
      /if\(not\(variables\('runbookAbsolute'\)\), fail\(format\('AlertRunbookUrlNotAbsolute: /,
    );
    assert.equal(moduleParam("alerts", "runbookUrl"), "[variables('checkedRunbookUrl')]");
    // Prod reads them from the environment (GitHub environment secrets), empty when unset: then the check fails.
    assert.equal(prodValue("alertEmail"), "");
    assert.equal(prodValue("alertRunbookUrl"), "");
  });

  it("keeps logs (the SQL and Service Bus audit included) for a parameter's days, a year in prod, with shared keys off", function () {
    assert.equal(parameterDefault(main, "logRetentionInDays"), 30);
    assert.equal(prodValue("logRetentionInDays"), 365);
    assert.equal(moduleParam("monitoring", "retentionInDays"), "[parameters('logRetentionInDays')]");
    const workspace = single(main, "Microsoft.OperationalInsights/workspaces");
    assert.equal(props(workspace).retentionInDays, "[parameters('retentionInDays')]");
    assert.equal(obj(props(workspace).features, "features").disableLocalAuth, true);
  });

  it("is zone-redundant in prod: the database and the App Service plan", function () {
    assert.equal(parameterDefault(main, "zoneRedundant"), false);
    assert.equal(prodValue("zoneRedundant"), true);
    for (const module of ["sql", "worker"]) {
      assert.equal(moduleParam(module, "zoneRedundant"), "[parameters('zoneRedundant')]", module);
    }
    assert.equal(
      props(single(main, "Microsoft.Sql/servers/databases")).zoneRedundant,
      "[parameters('zoneRedundant')]",
    );
    assert.equal(
      props(single(main, "Microsoft.Web/serverfarms")).zoneRedundant,
      "[parameters('zoneRedundant')]",
    );
    // Zone redundancy needs two instances at least: prod's autoscale floor.
    assert.ok(Number(prodValue("autoscaleMinimumCapacity")) >= 2);
  });

  it("never pauses prod's serverless database, and sets the delay on serverless SKUs only", function () {
    assert.equal(prodValue("sqlAutoPauseDelayMinutes"), -1);
    assert.match(str(prodValue("sqlDatabaseSkuName")), /^GP_S_/);
    const database = single(main, "Microsoft.Sql/servers/databases");
    assert.equal(
      props(database).autoPauseDelay,
      "[if(variables('serverless'), parameters('autoPauseDelayMinutes'), null())]",
    );
    const sqlTemplate = database.template;
    assert.equal(
      obj(sqlTemplate.variables, "variables").serverless,
      "[startsWith(parameters('databaseSkuName'), 'GP_S_')]",
    );
  });

  it("turns Defender for SQL on in prod, and gives the SQL server no identity it does not use", function () {
    assert.equal(prodValue("defenderForSql"), true);
    const protection = single(main, "Microsoft.Sql/servers/advancedThreatProtectionSettings");
    assert.equal(protection.raw.condition, "[parameters('defenderForSql')]");
    assert.deepEqual(props(protection), { state: "Enabled" });
    // CREATE USER ... WITH SID needs no Graph lookup, so the server holds no identity and no directory role.
    assert.equal(single(main, "Microsoft.Sql/servers").raw.identity, undefined);
  });

  it("lets prod's app identity, and it alone, send the first message (publishers from APP_PRINCIPAL_ID)", async function () {
    assert.deepEqual(prodValue("publishers"), []);
    const id = "0a0b0c0d-0000-4000-8000-00000000000a";
    const result = await runBicepShared(["build-params", "infra/main.prod.bicepparam", "--stdout"], {
      APP_PRINCIPAL_ID: id,
    });
    assert.equal(result.code, 0, result.stderr);
    const built = JSON.parse(str((JSON.parse(result.stdout) as JsonObject).parametersJson)) as JsonObject;
    assert.deepEqual(obj(obj(built.parameters, "parameters").publishers, "publishers").value, [
      { principalId: id, principalType: "ServicePrincipal" },
    ]);
    const dev = obj((await compileParameters("infra/main.dev.bicepparam")).parameters, "parameters");
    assert.equal(dev.publishers, undefined);
  });
});
