/**
 * The DLQ console's operators in Azure, compiled by the pinned Bicep CLI: dlqReaders and dlqOperators become role
 * assignments on the worker's queue (and the archive's container) for exactly the listed principals, none when the
 * lists are empty; the archive is a storage account that refuses shared keys; prod's console cannot run on a shared
 * secret; operator access (Bastion and a jump VM) is off unless asked for.
 */
import assert from "node:assert/strict";
import {
  compileParameters,
  compileTemplate,
  obj,
  ofType,
  parameterDefault,
  props,
  runBicepShared,
  str,
  templates,
  type ArmResource,
  type Json,
  type JsonObject,
} from "./arm.ts";

const RECEIVER = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0";
const SENDER = "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39";
const BLOB_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe";
const VM_USER_LOGIN = "fb879df8-f326-4884-b1cf-06f3ad86be52";
const READER = "acdd72a7-3385-48ef-bd42-f606fba81ae7";
const A = "11111111-1111-4111-8111-111111111111";
const B = "22222222-2222-4222-8222-222222222222";

type Principal = { principalId: string; principalType?: string };

/** ARM's union() of arrays: the items of both, in order, each distinct value once (by its JSON). */
function union(...lists: Principal[][]): Principal[] {
  const seen = new Map<string, Principal>();
  for (const item of lists.flat()) seen.set(JSON.stringify(item), seen.get(JSON.stringify(item)) ?? item);
  return [...seen.values()];
}

describe("the DLQ console's operators, the archive and operator access, compiled to ARM JSON", function () {
  this.timeout(180_000);
  let main: JsonObject;
  const modules = () => obj(main.resources, "resources");
  const moduleOf = (name: string) => obj(modules()[name], name);
  const moduleTemplate = (name: string) =>
    obj(obj(moduleOf(name).properties, "properties").template, `${name} template`);
  const moduleParam = (module: string, name: string): Json | undefined => {
    const parameters = obj(obj(moduleOf(module).properties, "properties").parameters, `${module} parameters`);
    const value = parameters[name];
    return typeof value === "string" ? value : obj(value, `${module}.${name}`).value;
  };
  const roleOf = (template: JsonObject, assignment: ArmResource) => {
    const variable = /variables\('(\w+)'\)/.exec(str(props(assignment).roleDefinitionId))![1]!;
    return str(obj(template.variables, "variables")[variable]);
  };
  const assignments = (template: JsonObject) =>
    ofType(template, "Microsoft.Authorization/roleAssignments").filter((a) => a.template === template);

  before(async function () {
    main = await compileTemplate("infra/main.bicep");
  });

  it("lists the operators per role as parameters, empty by default, and hands them to the modules", function () {
    assert.deepEqual(parameterDefault(main, "dlqReaders"), []);
    assert.deepEqual(parameterDefault(main, "dlqOperators"), []);
    assert.equal(moduleParam("operators", "readers"), "[parameters('dlqReaders')]");
    assert.equal(moduleParam("operators", "operators"), "[parameters('dlqOperators')]");
    assert.equal(moduleParam("operators", "queueName"), "[variables('workerQueueName')]");
    // Only operators write the archive; readers have nothing on it.
    assert.equal(moduleParam("archive", "writers"), "[parameters('dlqOperators')]");
  });

  it("grants Data Receiver to readers and operators and Data Sender to operators, on the queue, for exactly those listed", function () {
    const template = moduleTemplate("operators");
    const [receivers, senders] = ["receiverRoles", "senderRoles"].map((symbol) =>
      assignments(template).find((a) => a.symbol === symbol)!,
    );
    assert.equal(roleOf(template, receivers!), RECEIVER);
    assert.equal(roleOf(template, senders!), SENDER);
    const queueScope =
      "[resourceId('Microsoft.ServiceBus/namespaces/queues', parameters('namespaceName'), parameters('queueName'))]";
    for (const a of [receivers!, senders!])
      assert.equal(a.raw.scope, queueScope, `${a.symbol}: the queue, not the namespace`);
    assert.equal(
      obj(template.variables, "variables").receivers,
      "[union(parameters('readers'), parameters('operators'))]",
    );
    assert.deepEqual(receivers!.raw.copy, {
      name: "receiverRoles",
      count: "[length(variables('receivers'))]",
    });
    assert.deepEqual(senders!.raw.copy, { name: "senderRoles", count: "[length(parameters('operators'))]" });
    assert.equal(props(receivers!).principalId, "[variables('receivers')[copyIndex()].principalId]");
    assert.equal(props(senders!).principalId, "[parameters('operators')[copyIndex()].principalId]");
    assert.equal(
      props(senders!).principalType,
      "[coalesce(tryGet(parameters('operators')[copyIndex()], 'principalType'), 'Group')]",
    );
    // What those expressions give (ARM's union keeps each distinct principal once): none for empty lists, one
    // receiver assignment for a principal listed in both roles.
    const assigned = (readers: Principal[], operators: Principal[]) => ({
      receivers: union(readers, operators).map((p) => p.principalId),
      senders: operators.map((p) => p.principalId),
    });
    assert.deepEqual(assigned([], []), { receivers: [], senders: [] });
    assert.deepEqual(assigned([{ principalId: A }], [{ principalId: B }]), {
      receivers: [A, B],
      senders: [B],
    });
    assert.deepEqual(assigned([{ principalId: A }], [{ principalId: A }]), { receivers: [A], senders: [A] });
  });

  it("keeps the archive in a storage account that refuses shared keys and anonymous reads, versioned and soft-deleted", function () {
    const template = moduleTemplate("archive");
    const account = ofType(template, "Microsoft.Storage/storageAccounts")[0]!;
    const p = props(account);
    assert.equal(p.allowSharedKeyAccess, false);
    assert.equal(p.defaultToOAuthAuthentication, true);
    assert.equal(p.allowBlobPublicAccess, false);
    assert.equal(p.minimumTlsVersion, "TLS1_2");
    assert.equal(p.supportsHttpsTrafficOnly, true);
    assert.equal(p.publicNetworkAccess, "[parameters('publicNetworkAccess')]");
    assert.equal(moduleParam("archive", "publicNetworkAccess"), "[variables('publicNetworkAccess')]");
    assert.equal(
      obj(main.variables, "variables").publicNetworkAccess,
      "[if(parameters('privateNetwork'), 'Disabled', 'Enabled')]",
    );
    const blobs = props(ofType(template, "Microsoft.Storage/storageAccounts/blobServices")[0]!);
    assert.equal(blobs.isVersioningEnabled, true);
    assert.equal(obj(blobs.deleteRetentionPolicy, "deleteRetentionPolicy").enabled, true);
    assert.equal(obj(blobs.containerDeleteRetentionPolicy, "containerDeleteRetentionPolicy").enabled, true);
    const writers = assignments(template)[0]!;
    assert.equal(roleOf(template, writers), BLOB_CONTRIBUTOR);
    assert.match(
      str(writers.raw.scope),
      /^\[resourceId\('Microsoft\.Storage\/storageAccounts\/blobServices\/containers'/,
    );
    assert.deepEqual(writers.raw.copy, { name: "writerRoles", count: "[length(parameters('writers'))]" });
    // On the private network the archive has its own endpoint in the blob zone.
    assert.equal(moduleOf("archiveEndpoint").condition, "[parameters('privateNetwork')]");
    assert.equal(moduleParam("archiveEndpoint", "groupId"), "blob");
    assert.equal(
      moduleParam("archiveEndpoint", "dnsZoneId"),
      "[reference('network').outputs.blobDnsZoneId.value]",
    );
  });

  it("makes the archive tamper-evident: each message immutable for 30 days, its reads, writes and deletes in the workspace", function () {
    const template = moduleTemplate("archive");
    const container = ofType(template, "Microsoft.Storage/storageAccounts/blobServices/containers")[0]!;
    assert.deepEqual(obj(props(container).immutableStorageWithVersioning, "immutableStorageWithVersioning"), {
      enabled: "[greater(parameters('immutabilityDays'), 0)]",
    });
    const retention = ofType(
      template,
      "Microsoft.Storage/storageAccounts/blobServices/containers/immutabilityPolicies",
    )[0]!;
    assert.equal(retention.raw.condition, "[greater(parameters('immutabilityDays'), 0)]");
    assert.equal(
      retention.name,
      "[format('{0}/{1}/{2}/{3}', parameters('name'), 'default', parameters('containerName'), 'default')]",
    );
    assert.equal(props(retention).immutabilityPeriodSinceCreationInDays, "[parameters('immutabilityDays')]");
    assert.equal(parameterDefault(template, "immutabilityDays"), 30);
    // The diagnostic setting is on blobServices (where the Storage* categories are), to the deployment's workspace.
    const diagnostics = ofType(template, "Microsoft.Insights/diagnosticSettings")[0]!;
    assert.match(str(diagnostics.raw.scope), /Microsoft\.Storage\/storageAccounts\/blobServices/);
    const categories = (obj(diagnostics.raw, "diagnostics").properties as JsonObject).logs as JsonObject[];
    assert.deepEqual(
      categories.filter((c) => c.enabled === true).map((c) => c.category),
      ["StorageRead", "StorageWrite", "StorageDelete"],
    );
    assert.match(str(props(diagnostics).workspaceId), /Microsoft\.OperationalInsights\/workspaces/);
    assert.equal(
      moduleParam("archive", "logAnalyticsWorkspaceName"),
      "[variables('logAnalyticsWorkspaceName')]",
    );
    assert.ok(
      (moduleOf("archive").dependsOn as string[]).some((d) => /monitoring/.test(d)),
      "the workspace exists before the setting names it",
    );
  });

  it("puts no key, SAS or connection string in any output", function () {
    for (const template of templates(main)) {
      for (const [name, output] of Object.entries(obj(template.outputs ?? {}, "outputs"))) {
        const text = JSON.stringify(output);
        assert.doesNotMatch(
          text,
          /listKeys|listAccountSas|listServiceSas|listConnectionStrings|AccountKey|SharedAccessKey/i,
          name,
        );
      }
    }
    const outputs = obj(main.outputs, "outputs");
    assert.equal(
      obj(outputs.ARCHIVE_CONTAINER_URL, "ARCHIVE_CONTAINER_URL").value,
      "[reference('archive').outputs.containerUrl.value]",
    );
  });

  it("prod: no shared-secret console: Service Bus without SAS, the archive without keys and off the internet", async function () {
    const prod = obj((await compileParameters("infra/main.prod.bicepparam")).parameters, "parameters");
    assert.equal(obj(prod.privateNetwork, "privateNetwork").value, true);
    // Entra ID only on the namespace (no SAS connection string to hand a console) and on the archive.
    const namespace = ofType(main, "Microsoft.ServiceBus/namespaces")[0]!;
    assert.equal(props(namespace).disableLocalAuth, true);
    assert.equal(
      props(ofType(moduleTemplate("archive"), "Microsoft.Storage/storageAccounts")[0]!).allowSharedKeyAccess,
      false,
    );
    // Without DLQ_* set, prod grants no operator anything.
    assert.deepEqual(obj(prod.dlqReaders, "dlqReaders").value, []);
    assert.deepEqual(obj(prod.dlqOperators, "dlqOperators").value, []);
    assert.equal(obj(prod.operatorAccess, "operatorAccess").value, false);
  });

  it("prod lists the operator groups from DLQ_READER_GROUP_IDS and DLQ_OPERATOR_GROUP_IDS", async function () {
    const result = await runBicepShared(["build-params", "infra/main.prod.bicepparam", "--stdout"], {
      DLQ_READER_GROUP_IDS: A,
      DLQ_OPERATOR_GROUP_IDS: `${B}, ${A}`,
    });
    assert.equal(result.code, 0, result.stderr);
    const built = obj(
      (JSON.parse(str((JSON.parse(result.stdout) as JsonObject).parametersJson)) as JsonObject).parameters,
      "parameters",
    );
    assert.deepEqual(obj(built.dlqReaders, "dlqReaders").value, [{ principalId: A, principalType: "Group" }]);
    assert.deepEqual(obj(built.dlqOperators, "dlqOperators").value, [
      { principalId: B, principalType: "Group" },
      { principalId: A, principalType: "Group" },
    ]);
  });

  it("operator access is off by default; on, a Standard Bastion with tunnelling and a jump VM with Entra ID login and no public address", function () {
    assert.equal(parameterDefault(main, "operatorAccess"), false);
    // On without the private network is an error by name, not silently ignored.
    assert.match(
      str(obj(main.variables, "variables").withOperatorAccess),
      /^\[if\(parameters\('operatorAccess'\), if\(parameters\('privateNetwork'\), true\(\), fail\('OperatorAccessWithoutPrivateNetwork: .*'\)\), false\(\)\)\]$/,
    );
    assert.equal(moduleOf("operatorJumpbox").condition, "[variables('withOperatorAccess')]");
    assert.equal(
      moduleParam("operatorJumpbox", "operators"),
      "[union(parameters('dlqReaders'), parameters('dlqOperators'))]",
    );
    assert.match(str(obj(main.variables, "variables").checkedOperatorKey), /OperatorKeyMissing/);
    const template = moduleTemplate("operatorJumpbox");
    const bastion = ofType(template, "Microsoft.Network/bastionHosts")[0]!;
    assert.equal(obj(bastion.raw.sku, "sku").name, "Standard");
    assert.equal(props(bastion).enableTunneling, true);
    const vm = ofType(template, "Microsoft.Compute/virtualMachines")[0]!;
    assert.equal(obj(vm.raw.identity, "identity").type, "SystemAssigned");
    const linux = obj(obj(props(vm).osProfile, "osProfile").linuxConfiguration, "linuxConfiguration");
    assert.equal(linux.disablePasswordAuthentication, true);
    const extension = ofType(template, "Microsoft.Compute/virtualMachines/extensions")[0]!;
    assert.equal(props(extension).type, "AADSSHLoginForLinux");
    assert.equal(props(extension).publisher, "Microsoft.Azure.ActiveDirectory");
    const nic = ofType(template, "Microsoft.Network/networkInterfaces")[0]!;
    assert.doesNotMatch(JSON.stringify(props(nic)), /publicIPAddress/);
    const roles = assignments(template).map((a) => [a.symbol, roleOf(template, a)]);
    assert.deepEqual(roles.sort(), [
      ["bastionReaderRoles", READER],
      ["loginRoles", VM_USER_LOGIN],
      ["nicReaderRoles", READER],
      ["vmReaderRoles", READER],
    ]);
  });

  it("the network gets AzureBastionSubnet and the jump VM's subnet (with a NAT gateway) only with operator access", function () {
    assert.equal(
      moduleParam("network", "operatorSubnetPrefix"),
      "[if(parameters('operatorAccess'), createObject('value', parameters('operatorSubnetPrefix')), createObject('value', ''))]",
    );
    const network = moduleTemplate("network");
    const vnet = ofType(network, "Microsoft.Network/virtualNetworks")[0]!;
    const subnets = str(props(vnet).subnets);
    assert.match(
      subnets,
      /if\(not\(variables\('operatorAccess'\)\), createArray\(\), createArray\(createObject\('name', 'AzureBastionSubnet'/,
    );
    assert.match(
      subnets,
      /createObject\('name', 'operators', 'properties', createObject\('addressPrefix', parameters\('operatorSubnetPrefix'\).*'natGateway'/,
    );
    assert.equal(
      ofType(network, "Microsoft.Network/natGateways")[0]!.raw.condition,
      "[variables('operatorAccess')]",
    );
    assert.equal(
      obj(network.variables, "variables").operatorAccess,
      "[not(empty(parameters('operatorSubnetPrefix')))]",
    );
  });
});
