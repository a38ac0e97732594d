import assert from "node:assert/strict";
import {
  compileParameters,
  compileTemplate,
  evaluateInteger,
  isObject,
  obj,
  ofType,
  parameterDefault,
  props,
  resources,
  runBicepShared,
  single,
  str,
  templates,
  type JsonObject,
} from "./arm.ts";

// Built-in role definition IDs, the same in every tenant (Microsoft's "Azure built-in roles" list).
const dataReceiverRole = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0";
const dataSenderRole = "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39";
const metricsPublisherRole = "3913510d-42f4-4e42-8a64-420c390055eb";

describe("infra/main.bicep compiled to ARM JSON by the pinned Bicep CLI", function () {
  this.timeout(120_000);
  let main: JsonObject;

  before(async function () {
    main = await compileTemplate("infra/main.bicep");
  });

  describe("Service Bus", function () {
    it("accepts Entra ID only, over TLS 1.2, on a tier that has duplicate detection", function () {
      const namespace = single(main, "Microsoft.ServiceBus/namespaces");
      assert.equal(props(namespace).disableLocalAuth, true);
      assert.equal(props(namespace).minimumTlsVersion, "1.2");
      const sku = obj(obj(namespace.template.parameters, "parameters").skuName, "skuName");
      assert.deepEqual(sku.allowedValues, ["Standard", "Premium"]);
      assert.equal(sku.defaultValue, "Standard");
    });

    it("creates the queue with duplicate detection and its tunables as parameters", function () {
      // The topic's service queues (test/infra/topic.test.ts) are looped resources of their own.
      const queues = ofType(main, "Microsoft.ServiceBus/namespaces/queues").filter(
        (q) => q.symbol === "queue",
      );
      assert.equal(queues.length, 1);
      const queue = queues[0]!;
      const p = props(queue);
      assert.equal(p.requiresDuplicateDetection, true);
      assert.equal(p.deadLetteringOnMessageExpiration, "[parameters('deadLetteringOnMessageExpiration')]");
      for (const name of ["duplicateDetectionHistoryTimeWindow", "lockDuration", "maxDeliveryCount"]) {
        assert.equal(p[name], `[parameters('${name}')]`, name);
      }
      assert.equal(parameterDefault(queue.template, "deadLetteringOnMessageExpiration"), true);
    });
  });

  describe("Azure SQL", function () {
    it("has an Entra-only server with an Entra admin from parameters and TLS 1.2", function () {
      const server = single(main, "Microsoft.Sql/servers");
      const p = props(server);
      assert.equal(p.minimalTlsVersion, "1.2");
      assert.equal(p.administratorLoginPassword, undefined);
      const admins = obj(p.administrators, "administrators");
      assert.equal(admins.azureADOnlyAuthentication, true);
      assert.equal(admins.administratorType, "ActiveDirectory");
      assert.equal(admins.sid, "[parameters('administratorObjectId')]");
      assert.equal(admins.login, "[parameters('administratorLogin')]");
    });

    it("opens the firewall to single addresses only, never to Azure at large or the internet", function () {
      const rules = ofType(main, "Microsoft.Sql/servers/firewallRules");
      assert.ok(rules.length > 0, "the worker's addresses need rules");
      for (const rule of rules) {
        const p = props(rule);
        assert.equal(p.startIpAddress, p.endIpAddress, `${rule.name} spans a range`);
        assert.doesNotMatch(rule.name, /AllowAllWindowsAzureIps/i);
      }
      const text = JSON.stringify(main);
      assert.doesNotMatch(text, /255\.255\.255\.255/);
      assert.doesNotMatch(text, /"0\.0\.0\.0"/);
    });
  });

  describe("App Service", function () {
    it("runs the worker on a current Node LTS with its user-assigned identity only", function () {
      const site = single(main, "Microsoft.Web/sites");
      const identity = obj(site.raw.identity, "identity");
      assert.equal(identity.type, "UserAssigned");
      const assigned = Object.keys(obj(identity.userAssignedIdentities, "userAssignedIdentities"));
      assert.equal(assigned.length, 1);
      assert.match(assigned[0]!, /userAssignedIdentities', parameters\('identityName'\)/);
      single(main, "Microsoft.ManagedIdentity/userAssignedIdentities");
      assert.equal(props(site).httpsOnly, true);
      const config = obj(props(site).siteConfig, "siteConfig");
      assert.equal(config.linuxFxVersion, "[parameters('linuxFxVersion')]");
      const runtime = obj(obj(site.template.parameters, "parameters").linuxFxVersion, "linuxFxVersion");
      const allowed = runtime.allowedValues;
      assert.ok(Array.isArray(allowed) && allowed.length > 0);
      for (const value of [...allowed, runtime.defaultValue]) {
        const major = /^NODE\|(\d+)-lts$/.exec(str(value))?.[1];
        assert.ok(major !== undefined && Number(major) >= 22, `${str(value)} is not Node 22 LTS or newer`);
      }
      assert.equal(
        parameterDefault(site.template, "appCommandLine"),
        "node --max-semi-space-size=4 bin/sbinbox.js worker",
      );
    });

    it("takes the worker's start command from infra/main.bicep, refused by name unless it runs the worker", function () {
      assert.equal(
        parameterDefault(main, "appCommandLine"),
        "node --max-semi-space-size=4 bin/sbinbox.js worker",
      );
      const worker = obj(obj(main.resources, "resources").worker, "worker");
      const passed = obj(
        obj(obj(worker.properties, "properties").parameters, "parameters").appCommandLine,
        "it",
      );
      assert.equal(passed.value, "[variables('checkedAppCommandLine')]");
      assert.match(
        str(obj(main.variables, "variables").checkedAppCommandLine),
        /^\[if\(and\(startsWith\(parameters\('appCommandLine'\), 'node '\), endsWith\(parameters\('appCommandLine'\), ' bin\/sbinbox\.js worker'\)\), parameters\('appCommandLine'\), fail\(format\('AppCommandLineNotWorker: /,
      );
    });

    it("keeps the worker always on, health-checked, HTTPS only, no FTP, TLS 1.2", function () {
      const site = single(main, "Microsoft.Web/sites");
      const config = obj(props(site).siteConfig, "siteConfig");
      assert.equal(config.alwaysOn, true);
      assert.equal(config.ftpsState, "Disabled");
      assert.equal(config.minTlsVersion, "1.2");
      assert.equal(config.scmMinTlsVersion, "1.2");
      assert.equal(config.healthCheckPath, "[parameters('healthCheckPath')]");
      assert.equal(parameterDefault(site.template, "healthCheckPath"), "/healthz");
      const basicAuth = ofType(main, "Microsoft.Web/sites/basicPublishingCredentialsPolicies");
      assert.equal(basicAuth.length, 2);
      for (const policy of basicAuth) assert.equal(props(policy).allow, false);
      const plan = single(main, "Microsoft.Web/serverfarms");
      assert.equal(props(plan).reserved, true, "Linux plan");
    });

    it("passes the worker's settings, Application Insights read from the resource itself", function () {
      const settings = single(main, "Microsoft.Web/sites/config");
      assert.match(settings.name, /'appsettings'/);
      const expression = str(settings.raw.properties);
      assert.match(expression, /'APPLICATIONINSIGHTS_CONNECTION_STRING', reference\('applicationInsights'\)/);
      // The component takes no instrumentation key: the worker authenticates with its user-assigned identity,
      // which DefaultAzureCredential (Service Bus, SQL) also finds through AZURE_CLIENT_ID.
      assert.match(
        expression,
        /'APPLICATIONINSIGHTS_AUTHENTICATION_STRING', format\('Authorization=AAD;ClientId=\{0\}', reference\('identity'\)\.clientId\)/,
      );
      assert.match(expression, /'AZURE_CLIENT_ID', reference\('identity'\)\.clientId/);
      const worker = obj(obj(main.resources, "resources").worker, "worker module");
      const params = obj(obj(worker.properties, "module properties").parameters, "module parameters");
      const appSettings = obj(obj(params.appSettings, "appSettings").value, "appSettings value");
      for (const name of [
        "SBINBOX_SERVICEBUS_NAMESPACE",
        "SBINBOX_QUEUE",
        "SBINBOX_CONSUMER",
        "SBINBOX_SQLSERVER_SERVER",
        "SBINBOX_SQLSERVER_DATABASE",
        "SBINBOX_MAX_CONCURRENT_CALLS",
        "SBINBOX_HANDLERS",
        "OTEL_SERVICE_NAME",
      ]) {
        assert.ok(name in appSettings, `${name} missing`);
      }
      assert.equal(appSettings.SBINBOX_DATABASE, "sqlserver");
      assert.doesNotMatch(JSON.stringify(appSettings), /CONNECTION_STRING|Password|listKeys/i);
    });
  });

  describe("inbox retention setting", function () {
    const retentionFor = (values: Record<string, number>) =>
      evaluateInteger(main, "[variables('inboxRetentionHours')]", values);
    const redeliverableHours = (ttl: number, lockSeconds: number, deliveries: number) =>
      ttl + (lockSeconds * deliveries) / 3600;

    it("reaches the worker, derived from the queue's own settings", function () {
      const worker = obj(obj(main.resources, "resources").worker, "worker module");
      const params = obj(obj(worker.properties, "module properties").parameters, "module parameters");
      const appSettings = obj(obj(params.appSettings, "appSettings").value, "appSettings value");
      assert.equal(appSettings.SBINBOX_RETENTION_HOURS, "[string(variables('inboxRetentionHours'))]");
      assert.equal(
        appSettings.SBINBOX_QUEUE_LOCK_DURATION_MS,
        "[string(mul(parameters('lockDurationSeconds'), 1000))]",
      );
    });

    it("outlives every redelivery for the defaults and for long locks and many deliveries", function () {
      assert.ok(retentionFor({}) > redeliverableHours(336, 60, 10));
      const extreme = { messageTimeToLiveHours: 1, lockDurationSeconds: 300, maxDeliveryCount: 2000 };
      assert.ok(retentionFor(extreme) > redeliverableHours(1, 300, 2000), `${retentionFor(extreme)} h`);
    });
  });

  describe("role assignments", function () {
    it("give the worker Data Receiver and Data Sender (its scheduled retries), publishers Data Sender, on the queue, named guid(scope, principal, role)", function () {
      // The topic's assignments (test/infra/topic.test.ts) are the alternative to the queue's.
      const onTopic = ["topicSenderRoles"];
      // The worker's and the publishers' (the identity module); the console's operators' are in
      // test/infra/operators.test.ts.
      const identity = obj(
        obj(obj(main.resources, "resources").roles, "roles").properties,
        "roles properties",
      ).template;
      const assignments = ofType(main, "Microsoft.Authorization/roleAssignments").filter(
        (a) => !onTopic.includes(a.symbol) && a.template === identity,
      );
      assert.equal(assignments.length, 4);
      const roleIds = obj(assignments[0]!.template.variables, "variables");
      assert.equal(roleIds.dataReceiverRoleId, dataReceiverRole);
      assert.equal(roleIds.dataSenderRoleId, dataSenderRole);
      const queueScope =
        "resourceId('Microsoft.ServiceBus/namespaces/queues', parameters('namespaceName'), parameters('queueName'))";
      const expected = [
        { principal: "parameters('receiverPrincipalId')", role: "dataReceiverRoleId" },
        { principal: "parameters('receiverPrincipalId')", role: "dataSenderRoleId" },
        { principal: "parameters('senders')[copyIndex()].principalId", role: "dataSenderRoleId" },
      ];
      for (const { principal, role } of expected) {
        const assignment = assignments.find(
          (a) =>
            str(props(a).roleDefinitionId).includes(role) && str(props(a).principalId).includes(principal),
        );
        assert.ok(assignment, `no assignment of ${role}`);
        assert.equal(assignment.name, `[guid(${queueScope}, ${principal}, variables('${role}'))]`);
        assert.equal(assignment.raw.scope, `[${queueScope}]`);
        assert.equal(
          props(assignment).roleDefinitionId,
          `[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', variables('${role}'))]`,
        );
      }
    });

    it("give an optional outbox relay identity Data Sender only, through the senders list", function () {
      const parameter = obj(
        obj(main.parameters, "parameters").outboxRelayPrincipalId,
        "outboxRelayPrincipalId",
      );
      assert.equal(parameter.nullable, true, "optional");
      // The identity module's deployment, at the top level of main.
      const deployments = Object.values(obj(main.resources, "resources")).filter(
        (r): r is JsonObject => isObject(r) && r.type === "Microsoft.Resources/deployments",
      );
      const withSenders = deployments
        .map((d) => obj(obj(d.properties, "properties").parameters, "parameters").senders)
        .filter(isObject);
      assert.equal(withSenders.length, 1, "one module takes the senders");
      const senders = str(withSenders[0]!.value);
      assert.match(senders, /parameters\('outboxRelayPrincipalId'\)/);
      assert.match(senders, /parameters\('publishers'\)/);
    });

    it("give the worker Monitoring Metrics Publisher on the Application Insights component, named guid(scope, principal, role)", function () {
      const assignment = ofType(main, "Microsoft.Authorization/roleAssignments").find((a) =>
        str(props(a).roleDefinitionId).includes("metricsPublisherRoleId"),
      );
      assert.ok(assignment, "no Monitoring Metrics Publisher assignment");
      assert.equal(
        obj(assignment.template.variables, "variables").metricsPublisherRoleId,
        metricsPublisherRole,
      );
      const componentScope =
        "resourceId('Microsoft.Insights/components', coalesce(parameters('applicationInsightsName'), ''))";
      assert.equal(
        assignment.name,
        `[guid(${componentScope}, parameters('receiverPrincipalId'), variables('metricsPublisherRoleId'))]`,
      );
      assert.equal(assignment.raw.scope, `[${componentScope}]`);
      const p = props(assignment);
      assert.equal(p.principalId, "[parameters('receiverPrincipalId')]");
      assert.equal(p.principalType, "[parameters('receiverPrincipalType')]");
      assert.equal(parameterDefault(assignment.template, "receiverPrincipalType"), "ServicePrincipal");
      assert.equal(
        p.roleDefinitionId,
        "[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', variables('metricsPublisherRoleId'))]",
      );
      // The composition names the same component the monitoring module creates, and the worker's own principal.
      const moduleParams = (name: string) =>
        obj(
          obj(obj(obj(main.resources, "resources")[name], name).properties, "module properties").parameters,
          "module parameters",
        );
      const roles = moduleParams("roles");
      const component = "[variables('applicationInsightsName')]";
      assert.equal(obj(roles.applicationInsightsName, "applicationInsightsName").value, component);
      assert.equal(
        obj(moduleParams("monitoring").applicationInsightsName, "applicationInsightsName").value,
        component,
      );
      assert.match(
        str(obj(roles.receiverPrincipalId, "receiverPrincipalId").value),
        /^\[reference\('worker'\)\.outputs\.principalId\.value\]$/,
      );
    });
  });

  describe("monitoring and autoscale", function () {
    it("has a workspace-based Application Insights that accepts Entra ID tokens only", function () {
      const insights = single(main, "Microsoft.Insights/components");
      assert.equal(props(insights).DisableLocalAuth, true);
      assert.match(str(props(insights).WorkspaceResourceId), /Microsoft\.OperationalInsights\/workspaces/);
      single(main, "Microsoft.OperationalInsights/workspaces");
    });

    it("scales the plan out and in on the queue's ActiveMessages, with bounds as parameters", function () {
      const autoscale = single(main, "Microsoft.Insights/autoscalesettings");
      const profiles = props(autoscale).profiles;
      assert.ok(Array.isArray(profiles) && profiles.length === 1);
      const profile = obj(profiles[0], "profile");
      assert.deepEqual(profile.capacity, {
        minimum: "[string(parameters('minimumCapacity'))]",
        maximum: "[string(parameters('maximumCapacity'))]",
        default: "[string(parameters('defaultCapacity'))]",
      });
      const rules = profile.rules;
      assert.ok(Array.isArray(rules));
      const directions = rules.map((r) => {
        const rule = obj(r, "rule");
        const trigger = obj(rule.metricTrigger, "metricTrigger");
        assert.equal(trigger.metricName, "ActiveMessages");
        assert.equal(trigger.metricNamespace, "Microsoft.ServiceBus/namespaces");
        const dimensions =
          typeof trigger.dimensions === "string"
            ? /^\[variables\('(\w+)'\)\]$/.exec(trigger.dimensions)?.[1]
            : undefined;
        const resolved = dimensions
          ? obj(autoscale.template.variables, "variables")[dimensions]
          : trigger.dimensions;
        assert.match(
          JSON.stringify(resolved),
          /"DimensionName":"EntityName".*"Values":\["\[parameters\('queueName'\)\]"\]/,
        );
        return obj(rule.scaleAction, "scaleAction").direction;
      });
      assert.deepEqual(directions.sort(), ["Decrease", "Increase"]);
    });
  });

  describe("first-deployment path", function () {
    const outputs = () => obj(main.outputs, "outputs");

    it("outputs the worker identity's client ID and name, from which the database user is created", function () {
      assert.match(str(obj(outputs().WORKER_IDENTITY_CLIENT_ID, "output").value), /identityClientId/);
      assert.match(str(obj(outputs().WORKER_IDENTITY_NAME, "output").value), /identityName/);
      const identity = single(main, "Microsoft.ManagedIdentity/userAssignedIdentities");
      const module = templates(main).find((t) => t === identity.template)!;
      const moduleOutputs = obj(module.outputs, "appservice outputs");
      assert.equal(
        obj(moduleOutputs.identityClientId, "identityClientId").value,
        "[reference('identity').clientId]",
      );
      assert.equal(
        obj(moduleOutputs.principalId, "principalId").value,
        "[reference('identity').principalId]",
      );
    });

    it("assigns the roles to the identity the app runs as, not to a system identity", function () {
      const roles = obj(obj(main.resources, "resources").roles, "roles module");
      const params = obj(obj(roles.properties, "module properties").parameters, "module parameters");
      assert.match(
        str(obj(params.receiverPrincipalId, "receiverPrincipalId").value),
        /outputs\.principalId\.value/,
      );
      const assignments = ofType(main, "Microsoft.Authorization/roleAssignments");
      for (const assignment of assignments) {
        assert.ok(
          [
            "[parameters('receiverPrincipalId')]",
            "[parameters('senders')[copyIndex()].principalId]",
            // The console's operators, people listed by object id (dlqReaders, dlqOperators): the operators module,
            // the archive's writers and the jump box's sign-in.
            "[variables('receivers')[copyIndex()].principalId]",
            "[parameters('operators')[copyIndex()].principalId]",
            "[parameters('writers')[copyIndex()].principalId]",
          ].includes(str(props(assignment).principalId)),
          str(props(assignment).principalId),
        );
      }
    });

    it("tags the site with the azd service name that azure.yaml deploys to", function () {
      const site = single(main, "Microsoft.Web/sites");
      assert.match(str(site.raw.tags), /'azd-service-name', parameters\('azdServiceName'\)/);
      assert.equal(parameterDefault(site.template, "azdServiceName"), "worker");
    });

    it("sizes the database from a parameter in GB, 2 GB by default (Basic's limit)", function () {
      const database = single(main, "Microsoft.Sql/servers/databases");
      assert.equal(
        props(database).maxSizeBytes,
        "[mul(mul(mul(parameters('databaseMaxSizeGb'), 1024), 1024), 1024)]",
      );
      assert.equal(parameterDefault(main, "sqlDatabaseMaxSizeGb"), 2);
      const sql = obj(obj(main.resources, "resources").sql, "sql module");
      const params = obj(obj(sql.properties, "module properties").parameters, "module parameters");
      assert.equal(
        obj(params.databaseMaxSizeGb, "databaseMaxSizeGb").value,
        "[parameters('sqlDatabaseMaxSizeGb')]",
      );
    });

    it("sends App Service, Service Bus, SQL audit and the archive's blob logs to the Log Analytics workspace", function () {
      const settings = ofType(main, "Microsoft.Insights/diagnosticSettings");
      const byScope = new Map(settings.map((s) => [str(s.raw.scope), s]));
      const scopes = [...byScope.keys()].join(" ");
      assert.equal(settings.length, 4, scopes);
      for (const [scope, setting] of byScope) {
        assert.match(str(props(setting).workspaceId), /Microsoft\.OperationalInsights\/workspaces/, scope);
        assert.match(str(setting.raw.condition), /logAnalyticsWorkspaceName/, scope);
      }
      const logsOf = (pattern: RegExp) => {
        const found = [...byScope.entries()].find(([scope]) => pattern.test(scope));
        assert.ok(found, `no diagnostic setting scoped to ${pattern}`);
        return JSON.stringify(props(found[1]).logs);
      };
      assert.match(logsOf(/Microsoft\.Web\/sites/), /"categoryGroup":"allLogs","enabled":true/);
      assert.match(logsOf(/Microsoft\.ServiceBus\/namespaces/), /"categoryGroup":"allLogs","enabled":true/);
      assert.match(
        logsOf(/Microsoft\.Sql\/servers\/databases.*'master'/),
        /"category":"SQLSecurityAuditEvents"/,
      );
      // The dead-letter archive: who wrote, read or deleted an archived message.
      assert.match(logsOf(/Microsoft\.Storage\/storageAccounts\/blobServices/), /"category":"StorageDelete"/);
      const auditing = single(main, "Microsoft.Sql/servers/auditingSettings");
      assert.equal(props(auditing).state, "Enabled");
      assert.equal(props(auditing).isAzureMonitorTargetEnabled, true);
      // Every module is given the workspace: a diagnostic setting that is never created would pass the rest.
      for (const module of ["serviceBus", "worker", "sql", "archive"]) {
        const m = obj(obj(main.resources, "resources")[module], module);
        const params = obj(obj(m.properties, "module properties").parameters, "module parameters");
        assert.equal(
          obj(params.logAnalyticsWorkspaceName, `${module}.logAnalyticsWorkspaceName`).value,
          "[variables('logAnalyticsWorkspaceName')]",
        );
      }
    });

    it("keeps the plan's current instance count within the autoscale bounds; the minimum only on a first deployment", function () {
      const capacity = (current: number, min = 2, max = 10) => {
        const expression = str(obj(main.variables, "variables").planCapacity);
        // [if(greater(current, 0), min(max(current, minimum), maximum), minimum)], evaluated for given values.
        assert.match(
          expression,
          /^\[if\(greater\(parameters\('appServicePlanCurrentCapacity'\), 0\), min\(max\(parameters\('appServicePlanCurrentCapacity'\), parameters\('autoscaleMinimumCapacity'\)\), parameters\('autoscaleMaximumCapacity'\)\), parameters\('autoscaleMinimumCapacity'\)\)\]$/,
        );
        return current > 0 ? Math.min(Math.max(current, min), max) : min;
      };
      assert.equal(capacity(0), 2);
      assert.equal(capacity(7), 7);
      assert.equal(capacity(1), 2);
      assert.equal(capacity(40), 10);
      const worker = obj(obj(main.resources, "resources").worker, "worker module");
      const params = obj(obj(worker.properties, "module properties").parameters, "module parameters");
      assert.equal(obj(params.planCapacity, "planCapacity").value, "[variables('planCapacity')]");
    });
  });

  describe("conventions", function () {
    it("describes every parameter as Required. or Optional., matching whether it has a default", function () {
      let checked = 0;
      for (const template of templates(main)) {
        for (const [name, value] of Object.entries(obj(template.parameters ?? {}, "parameters"))) {
          const param = obj(value, name);
          const description = isObject(param.metadata) ? str(param.metadata.description) : "";
          const expected = "defaultValue" in param || param.nullable === true ? "Optional. " : "Required. ";
          assert.ok(description.startsWith(expected), `${name}: "${description}" should start "${expected}"`);
          checked++;
        }
      }
      assert.ok(checked > 40, `only ${checked} parameters seen`);
    });

    it("outputs names and ids, never a secret", function () {
      const secretName = /secret|password|key$|keys|connectionstring|token|sas/i;
      const secretValue =
        /listKeys|listConnectionStrings|listCredentials|ConnectionString|InstrumentationKey|primaryKey/i;
      let checked = 0;
      for (const template of templates(main)) {
        for (const [name, value] of Object.entries(obj(template.outputs ?? {}, "outputs"))) {
          const output = obj(value, name);
          assert.doesNotMatch(name, secretName, `output ${name}`);
          const expression = JSON.stringify({ value: output.value, copy: output.copy });
          assert.doesNotMatch(expression, secretValue, `output ${name}`);
          assert.notEqual(output.type, "securestring");
          checked++;
        }
      }
      assert.ok(checked > 20, `only ${checked} outputs seen`);
    });

    it("uses stable API versions only, except diagnostic settings, whose only GA version predates category groups", function () {
      for (const resource of resources(main)) {
        if (resource.type === "Microsoft.Insights/diagnosticSettings") {
          assert.equal(resource.raw.apiVersion, "2021-05-01-preview");
          continue;
        }
        assert.doesNotMatch(str(resource.raw.apiVersion), /preview/, `${resource.type}`);
      }
    });
  });
});

describe("infra/main.<env>.bicepparam compiled by the pinned Bicep CLI", function () {
  this.timeout(120_000);

  for (const env of ["dev", "prod"]) {
    it(`${env}: names its environment, keeps Node LTS and sane autoscale bounds`, async function () {
      const built = await compileParameters(`infra/main.${env}.bicepparam`);
      const parameters = obj(built.parameters, "parameters");
      const value = (name: string) => obj(parameters[name], name).value;
      assert.equal(value("environmentName"), env);
      // Read from the environment at deploy time; the checks supply a placeholder.
      assert.equal(value("sqlAdministratorObjectId"), "00000000-0000-0000-0000-000000000000");
      assert.ok(Number(value("autoscaleMinimumCapacity")) <= Number(value("autoscaleMaximumCapacity")));
      assert.match(
        str(value("appServicePlanSkuName")),
        /^(S\d|P\d+v\d)$/,
        "autoscale needs Standard or Premium",
      );
    });

    it(`${env}: an optional variable set but empty (an unset GitHub secret) falls back to its default`, async function () {
      const result = await runBicepShared(["build-params", `infra/main.${env}.bicepparam`, "--stdout"], {
        SQL_ADMIN_PRINCIPAL_TYPE: "",
        APP_SERVICE_PLAN_CAPACITY: "",
      });
      assert.equal(result.code, 0, result.stderr);
      const built = JSON.parse(str((JSON.parse(result.stdout) as JsonObject).parametersJson)) as JsonObject;
      const value = (name: string) => obj(obj(built.parameters, "parameters")[name], name).value;
      // No location in the file: the template takes the resource group's, which the bootstrap chose.
      assert.equal(obj(built.parameters, "parameters").location, undefined);
      assert.equal(value("sqlAdministratorPrincipalType"), "Group");
      assert.equal(value("appServicePlanCurrentCapacity"), 0);
      const given = await runBicepShared(["build-params", `infra/main.${env}.bicepparam`, "--stdout"], {
        APP_SERVICE_PLAN_CAPACITY: "5",
      });
      const givenParams = JSON.parse(
        str((JSON.parse(given.stdout) as JsonObject).parametersJson),
      ) as JsonObject;
      const givenValue = (name: string) => obj(obj(givenParams.parameters, "parameters")[name], name).value;
      assert.equal(givenValue("appServicePlanCurrentCapacity"), 5);
    });
  }

  it("prod: the database holds the inbox at the documented rate and retention (docs/deploy.md)", async function () {
    const built = await compileParameters("infra/main.prod.bicepparam");
    const value = (name: string) => obj(obj(built.parameters, "parameters")[name], name).value;
    // 50 messages/s, about 400 bytes per inbox row with its indexes, kept 361 hours (the prod retention).
    const inboxGb = (50 * 400 * 361 * 3600) / 1024 ** 3;
    assert.ok(
      Number(value("sqlDatabaseMaxSizeGb")) >= inboxGb * 2,
      `${JSON.stringify(value("sqlDatabaseMaxSizeGb"))} GB`,
    );
    assert.notEqual(value("sqlDatabaseSkuName"), "Basic", "Basic stops at 2 GB");
  });
});
