/**
 * The private variant (privateNetwork, on in prod), compiled by the pinned Bicep CLI: what it turns on is asserted
 * on the ARM JSON Azure receives, and prod's parameters are built to show they select it.
 */
import assert from "node:assert/strict";
import {
  compileParameters,
  compileTemplate,
  obj,
  ofType,
  parameterDefault,
  props,
  single,
  str,
  templates,
  type Json,
  type JsonObject,
} from "./arm.ts";

describe("the private network option (privateNetwork), compiled to ARM JSON by the pinned Bicep CLI", function () {
  this.timeout(120_000);
  let main: JsonObject;
  const modules = () => obj(main.resources, "resources");
  const moduleOf = (name: string) => obj(modules()[name], name);
  const param = (module: string, name: string): Json | undefined => {
    const parameters = obj(obj(moduleOf(module).properties, "properties").parameters, `${module} parameters`);
    const value = parameters[name];
    // A module parameter set conditionally compiles to one expression choosing between two { value } objects.
    return typeof value === "string" ? value : obj(value, `${module}.${name}`).value;
  };

  before(async function () {
    main = await compileTemplate("infra/main.bicep");
  });

  it("is a parameter, off by default, on in prod with Service Bus on Premium", async function () {
    assert.equal(parameterDefault(main, "privateNetwork"), false);
    const prod = obj((await compileParameters("infra/main.prod.bicepparam")).parameters, "parameters");
    assert.equal(obj(prod.privateNetwork, "privateNetwork").value, true);
    assert.equal(obj(prod.serviceBusSkuName, "serviceBusSkuName").value, "Premium");
    const dev = obj((await compileParameters("infra/main.dev.bicepparam")).parameters, "parameters");
    assert.equal(dev.privateNetwork, undefined, "dev keeps the default (off)");
    for (const name of ["network", "sqlEndpoint", "serviceBusEndpoint"]) {
      assert.equal(moduleOf(name).condition, "[parameters('privateNetwork')]", name);
    }
    // Standard has no private endpoints: the private variant is Premium whatever the parameter says.
    assert.equal(
      param("serviceBus", "skuName"),
      "[if(parameters('privateNetwork'), createObject('value', 'Premium'), createObject('value', parameters('serviceBusSkuName')))]",
    );
  });

  it("has a VNet with a subnet delegated to App Service and one for the private endpoints", function () {
    const vnet = single(main, "Microsoft.Network/virtualNetworks");
    // All inline (a subnet added by hand to a VNet with inline subnets is removed by the next deployment): app and
    // endpoints always, the GitHub runners' subnet (delegated to GitHub.Network/networkSettings) when given a prefix.
    // Each with its own NSG from the template (one attached by hand would be detached by the next deployment).
    const nsg = (i: number) =>
      `'networkSecurityGroup', createObject('id', resourceId('Microsoft.Network/networkSecurityGroups', format('nsg-{0}-{1}', parameters('name'), createArray('app', 'endpoints', 'runner', 'operators')[${i}])))`;
    const app = `createObject('name', 'app', 'properties', createObject('addressPrefix', parameters('appSubnetPrefix'), ${nsg(0)}, 'delegations', createArray(createObject('name', 'app-service', 'properties', createObject('serviceName', 'Microsoft.Web/serverFarms')))))`;
    const endpoints = `createObject('name', 'endpoints', 'properties', createObject('addressPrefix', parameters('endpointSubnetPrefix'), ${nsg(1)}, 'privateEndpointNetworkPolicies', 'Enabled'))`;
    const runner = `createObject('name', 'runner', 'properties', createObject('addressPrefix', parameters('runnerSubnetPrefix'), ${nsg(2)}, 'delegations', createArray(createObject('name', 'github-runners', 'properties', createObject('serviceName', 'GitHub.Network/networkSettings')))))`;
    // With operator access (bicep/modules/jumpbox): AzureBastionSubnet (no NSG: Bastion needs its own rules) and the
    // jump VM's subnet, whose outbound traffic leaves through a NAT gateway.
    const bastion = `createObject('name', 'AzureBastionSubnet', 'properties', createObject('addressPrefix', parameters('bastionSubnetPrefix')))`;
    const operators = `createObject('name', 'operators', 'properties', createObject('addressPrefix', parameters('operatorSubnetPrefix'), ${nsg(3)}, 'natGateway', createObject('id', resourceId('Microsoft.Network/natGateways', format('ng-{0}-operators', parameters('name'))))))`;
    assert.equal(
      props(vnet).subnets,
      `[concat(createArray(${app}, ${endpoints}), if(empty(parameters('runnerSubnetPrefix')), createArray(), createArray(${runner})), if(not(variables('operatorAccess')), createArray(), createArray(${bastion}, ${operators})))]`,
    );
    assert.equal(param("network", "runnerSubnetPrefix"), "[parameters('runnerSubnetPrefix')]");
    assert.equal(parameterDefault(main, "runnerSubnetPrefix"), "");
    const outputs = obj(main.outputs, "outputs");
    assert.equal(
      obj(outputs.RUNNER_SUBNET_ID, "RUNNER_SUBNET_ID").value,
      "[if(parameters('privateNetwork'), reference('network').outputs.runnerSubnetId.value, '')]",
    );
    assert.equal(
      str(param("worker", "virtualNetworkSubnetId")),
      "[if(parameters('privateNetwork'), createObject('value', reference('network').outputs.appSubnetId.value), createObject('value', null()))]",
    );
    const site = single(main, "Microsoft.Web/sites");
    assert.equal(props(site).virtualNetworkSubnetId, "[parameters('virtualNetworkSubnetId')]");
    const config = obj(props(site).siteConfig, "siteConfig");
    assert.equal(config.vnetRouteAllEnabled, "[not(equals(parameters('virtualNetworkSubnetId'), null()))]");
  });

  it("has a network security group for every subnet but Bastion's, the runner's and the operators' only with their subnet", function () {
    const groups = single(main, "Microsoft.Network/networkSecurityGroups");
    const names = "createArray('app', 'endpoints', 'runner', 'operators')";
    assert.deepEqual(groups.raw.copy, { name: "securityGroups", count: `[length(${names})]` });
    assert.equal(
      groups.raw.condition,
      `[and(or(not(equals(${names}[copyIndex()], 'runner')), not(empty(parameters('runnerSubnetPrefix')))), or(not(equals(${names}[copyIndex()], 'operators')), variables('operatorAccess')))]`,
    );
    assert.deepEqual(props(groups), {
      securityRules: `[if(equals(${names}[copyIndex()], 'runner'), parameters('runnerSecurityRules'), createArray())]`,
    });
  });

  it("has the private DNS zones of Azure SQL, Service Bus and App Service, each linked to the VNet", function () {
    const zones = single(main, "Microsoft.Network/privateDnsZones");
    const network = zones.template;
    const names = "variables('zoneNames')";
    assert.deepEqual(obj(network.variables, "variables").zoneNames, [
      "[variables('sqlDnsZoneName')]",
      "[parameters('serviceBusDnsZoneName')]",
      "[parameters('sitesDnsZoneName')]",
      // The dead-letter archive's blob endpoint (bicep/modules/archive).
      "[parameters('blobDnsZoneName')]",
    ]);
    assert.equal(parameterDefault(network, "sitesDnsZoneName"), "privatelink.azurewebsites.net");
    assert.equal(zones.name, `[${names}[copyIndex()]]`);
    assert.equal(obj(zones.raw.copy, "copy").count, `[length(${names})]`);
    // privatelink.database.windows.net in Azure's public cloud (its sqlServerHostname is .database.windows.net).
    const sqlZone = str(obj(network.variables, "variables").sqlDnsZoneName);
    assert.equal(sqlZone, "[format('privatelink{0}', environment().suffixes.sqlServerHostname)]");
    assert.equal(parameterDefault(network, "serviceBusDnsZoneName"), "privatelink.servicebus.windows.net");
    assert.equal(zones.raw.location, "global");

    const allLinks = ofType(main, "Microsoft.Network/privateDnsZones/virtualNetworkLinks");
    const linkLoop = (name: string) => allLinks.find((l) => obj(l.raw.copy, "copy").name === name)!;
    assert.deepEqual(allLinks.map((l) => obj(l.raw.copy, "copy").name).sort(), [
      "links",
      "serviceBusZoneExtraLinks",
      "sitesZoneExtraLinks",
      "sqlZoneExtraLinks",
    ]);
    // A runner's VNet (peered) gets its own link to each zone, one per id given, zone 0 SQL's and zone 1 Service Bus'.
    assert.equal(param("network", "linkedVirtualNetworkIds"), "[parameters('runnerVirtualNetworkIds')]");
    for (const [loop, zone] of [
      ["sqlZoneExtraLinks", 0],
      ["serviceBusZoneExtraLinks", 1],
      ["sitesZoneExtraLinks", 2],
    ] as const) {
      const extra = linkLoop(loop);
      assert.equal(obj(extra.raw.copy, "copy").count, "[length(parameters('linkedVirtualNetworkIds'))]");
      assert.ok(extra.name.startsWith(`[format('{0}/{1}', ${names}[${zone}], `), extra.name);
      assert.deepEqual(props(extra), {
        registrationEnabled: false,
        virtualNetwork: { id: "[parameters('linkedVirtualNetworkIds')[copyIndex()]]" },
      });
    }
    const links = linkLoop("links");
    assert.equal(obj(links.raw.copy, "copy").count, `[length(${names})]`);
    assert.match(
      links.name,
      new RegExp(`^\\[format\\('\\{0\\}/\\{1\\}', ${names.replace(/[()[\]]/g, "\\$&")}\\[copyIndex\\(\\)\\]`),
    );
    assert.deepEqual(props(links), {
      registrationEnabled: false,
      virtualNetwork: { id: "[resourceId('Microsoft.Network/virtualNetworks', parameters('name'))]" },
    });
    // The zone ids the endpoints register in are these zones, in this order.
    const outputs = obj(network.outputs, "network outputs");
    for (const [output, zone] of [
      ["sqlDnsZoneId", 0],
      ["serviceBusDnsZoneId", 1],
      ["sitesDnsZoneId", 2],
    ] as const) {
      assert.equal(
        str(obj(outputs[output], output).value),
        `[resourceId('Microsoft.Network/privateDnsZones', variables('zoneNames')[${zone}])]`,
      );
    }
  });

  it("gives SQL and Service Bus a private endpoint each, registered in its zone", function () {
    assert.equal(param("sqlEndpoint", "targetResourceId"), "[reference('sql').outputs.resourceId.value]");
    assert.equal(param("sqlEndpoint", "groupId"), "sqlServer");
    assert.equal(param("sqlEndpoint", "dnsZoneId"), "[reference('network').outputs.sqlDnsZoneId.value]");
    assert.equal(
      param("serviceBusEndpoint", "targetResourceId"),
      "[reference('serviceBus').outputs.resourceId.value]",
    );
    assert.equal(param("serviceBusEndpoint", "groupId"), "namespace");
    assert.equal(
      param("serviceBusEndpoint", "dnsZoneId"),
      "[reference('network').outputs.serviceBusDnsZoneId.value]",
    );
    // The site's (its SCM host included): with its public access off, the zip deploy reaches Kudu through it only.
    assert.equal(param("siteEndpoint", "targetResourceId"), "[reference('worker').outputs.resourceId.value]");
    assert.equal(param("siteEndpoint", "groupId"), "sites");
    assert.equal(param("siteEndpoint", "dnsZoneId"), "[reference('network').outputs.sitesDnsZoneId.value]");
    assert.equal(moduleOf("siteEndpoint").condition, "[parameters('privateNetwork')]");
    for (const name of ["sqlEndpoint", "serviceBusEndpoint", "siteEndpoint"]) {
      assert.equal(param(name, "subnetId"), "[reference('network').outputs.endpointSubnetId.value]", name);
    }
    // One module template serves all four (SQL, Service Bus, the site, the archive): the endpoint and its zone group.
    const endpoints = ofType(main, "Microsoft.Network/privateEndpoints");
    assert.equal(endpoints.length, 4);
    for (const endpoint of endpoints) {
      const connection = obj((props(endpoint).privateLinkServiceConnections as Json[])[0], "connection");
      assert.deepEqual(obj(connection.properties, "connection properties"), {
        privateLinkServiceId: "[parameters('targetResourceId')]",
        groupIds: ["[parameters('groupId')]"],
      });
      assert.deepEqual(props(endpoint).subnet, { id: "[parameters('subnetId')]" });
    }
    const groups = ofType(main, "Microsoft.Network/privateEndpoints/privateDnsZoneGroups");
    assert.equal(groups.length, 4);
    for (const group of groups) {
      assert.match(JSON.stringify(props(group)), /"privateDnsZoneId":"\[parameters\('dnsZoneId'\)\]"/);
    }
    const allowed = (templates(main).find((t) => t === endpoints[0]!.template)!.parameters as JsonObject)
      .groupId;
    assert.deepEqual(obj(allowed, "groupId").allowedValues, ["sqlServer", "namespace", "sites", "blob"]);
  });

  it("turns public network access off for SQL and Service Bus, and opens no SQL firewall rule", function () {
    assert.equal(
      str(obj(main.variables, "variables").publicNetworkAccess),
      "[if(parameters('privateNetwork'), 'Disabled', 'Enabled')]",
    );
    for (const module of ["sql", "serviceBus"]) {
      assert.equal(param(module, "publicNetworkAccess"), "[variables('publicNetworkAccess')]", module);
    }
    assert.equal(
      props(single(main, "Microsoft.Sql/servers")).publicNetworkAccess,
      "[parameters('publicNetworkAccess')]",
    );
    assert.equal(
      props(single(main, "Microsoft.ServiceBus/namespaces")).publicNetworkAccess,
      "[parameters('publicNetworkAccess')]",
    );
    assert.equal(
      param("sql", "allowedIpAddresses"),
      "[if(parameters('privateNetwork'), createObject('value', createArray()), createObject('value', reference('worker').outputs.possibleOutboundIpAddresses.value))]",
    );
  });

  it("closes the site and Kudu to the internet (public access off, both default Deny), keeps the health check", function () {
    assert.equal(param("worker", "denyPublicInbound"), "[parameters('privateNetwork')]");
    const site = single(main, "Microsoft.Web/sites");
    const config = obj(props(site).siteConfig, "siteConfig");
    assert.equal(
      config.ipSecurityRestrictionsDefaultAction,
      "[if(parameters('denyPublicInbound'), 'Deny', 'Allow')]",
    );
    // No rule at all: a default Deny with no Allow admits nothing from outside; the health check pings internally.
    assert.equal(config.ipSecurityRestrictions, undefined);
    assert.equal(config.healthCheckPath, "[parameters('healthCheckPath')]");
    assert.equal(
      props(site).publicNetworkAccess,
      "[if(parameters('denyPublicInbound'), 'Disabled', 'Enabled')]",
    );
    // Kudu (the SCM site) has its own rules: Deny too, and no rule, so only the private endpoint reaches it.
    assert.equal(config.scmIpSecurityRestrictionsUseMain, false);
    assert.equal(
      config.scmIpSecurityRestrictionsDefaultAction,
      "[if(parameters('denyPublicInbound'), 'Deny', 'Allow')]",
    );
    assert.equal(config.scmIpSecurityRestrictions, undefined);
    for (const policy of ofType(main, "Microsoft.Web/sites/basicPublishingCredentialsPolicies")) {
      assert.equal(props(policy).allow, false, "SCM takes Entra tokens only");
    }
  });

  it("lets the worker's start-up outlast RBAC propagation (up to 30 minutes) for the roles this deployment grants", function () {
    const appSettings = obj(param("worker", "appSettings"), "appSettings");
    assert.ok(
      Number(appSettings.SBINBOX_STARTUP_LIMIT_MS) > 30 * 60_000,
      JSON.stringify(appSettings.SBINBOX_STARTUP_LIMIT_MS),
    );
  });
});
