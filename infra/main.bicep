metadata name = 'sbinbox environment'
metadata description = 'One environment of sbinbox, deployed into its resource group: Service Bus, Azure SQL, monitoring, the worker on App Service, its roles and its autoscale.'

// Resource-group scope: an Owner creates rg-sbinbox-<env> once (scripts/environment-identities.ts), and each
// environment's deploy identity holds rights on that group only (docs/deploy.md, "The pipeline's rights").
targetScope = 'resourceGroup'

@description('Required. Environment name (dev, prod, ...); seeds the resource names (the resource group is rg-sbinbox-<environmentName>).')
@minLength(1)
@maxLength(20)
param environmentName string

@description('Optional. Azure region for every resource: the resource group\'s, which the bootstrap chose (docs/deploy.md, "Before the first prod deployment").')
param location string = resourceGroup().location

@description('Required. Display name of the Entra ID user or group that becomes the SQL server\'s administrator.')
@minLength(1)
param sqlAdministratorLogin string

@description('Required. Object ID of that Entra ID user or group.')
@minLength(36)
@maxLength(36)
param sqlAdministratorObjectId string

@description('Optional. Kind of principal the SQL administrator is.')
@allowed([
  'User'
  'Group'
  'Application'
])
param sqlAdministratorPrincipalType string = 'Group'

@description('Optional. SKU of the database.')
param sqlDatabaseSkuName string = 'Basic'

@description('Optional. Maximum size of the database in GB; docs/deploy.md gives the inbox\'s share per message rate and retention.')
@minValue(1)
param sqlDatabaseMaxSizeGb int = 2

@description('Optional. Service Bus tier (Standard or Premium; duplicate detection needs one of them).')
@allowed([
  'Standard'
  'Premium'
])
param serviceBusSkuName string = 'Standard'

@description('Optional. Name of the queue, without topicName (with it, the worker\'s queue is named consumerName and this one is not created).')
param queueName string = 'notes'

@description('Optional. Name the worker records as the consumer in the inbox; with a topic, also the name of the worker\'s own queue and of the subscription that forwards to it.')
param consumerName string = 'notes-worker'

@description('Optional. A topic (duplicate detection on) for events several services consume: the worker then receives from its own queue, named consumerName (duplicate detection on), which a subscription of the same name forwards every event to, and publishers get Data Sender on the topic. The worker\'s retries and replays go to its queue, never to the topic: no other subscription on it, wherever created and whatever its filter, sees them (docs/topics.md).')
param topicName string?

@description('Optional. The other consuming sbinbox services on the topic, one name each (the worker\'s own, consumerName, is always created): each gets a queue of that name and a subscription forwarding to it. Each service\'s own deployment grants its identity its roles on its queue.')
param otherSubscriptionNames string[] = []

@description('Optional. Duplicate-detection window of the queue (ISO 8601 duration).')
param duplicateDetectionHistoryTimeWindow string = 'PT10M'

@description('Optional. Peek-lock duration of the queue in seconds (at most 300).')
@minValue(5)
@maxValue(300)
param lockDurationSeconds int = 60

@description('Optional. Deliveries before a message is dead-lettered.')
@minValue(1)
param maxDeliveryCount int = 10

@description('Optional. Time to live of a message in hours.')
@minValue(1)
param messageTimeToLiveHours int = 336

@description('Optional. Hours an inbox row outlives the longest redelivery window, for messages resubmitted from the dead-letter queue.')
@minValue(1)
param inboxRetentionMarginHours int = 24

@description('Optional. Messages the worker processes at once on each instance.')
@minValue(1)
param maxConcurrentCalls int = 4

@description('Optional. Sessions (requiresSession) on the worker\'s entity, the queue or, with a topic, its own queue (which its subscription forwards to): events of one session key applied in order (docs/failure-handling.md, Sessions). Cannot be changed after the entity exists.')
param requiresSession bool = false

@description('Optional. With requiresSession, the sessions the worker holds at once on each instance.')
@minValue(1)
@maxValue(1000)
param maxConcurrentSessions int = 8

@description('Optional. SKU of the App Service plan (Standard or Premium, for autoscale).')
param appServicePlanSkuName string = 'P0v3'

@description('Optional. Node.js runtime of the worker.')
@allowed([
  'NODE|22-lts'
  'NODE|24-lts'
])
param linuxFxVersion string = 'NODE|22-lts'

@description('Optional. Command App Service runs to start the worker, `node [flags] bin/sbinbox.js worker`. The default\'s 4 MB semi-space (and the 20% heap growth bin/sbinbox.js adds) keeps a worker within 150 MB resident; `node --max-semi-space-size=0 --heap-growing-percent=0 bin/sbinbox.js worker` leaves the heap to V8 for less garbage-collection CPU a message at about 230 MB (docs/benchmark.md). Heap flags go here: NODE_OPTIONS refuses --heap-growing-percent.')
@minLength(1)
@maxLength(500)
param appCommandLine string = 'node --max-semi-space-size=4 bin/sbinbox.js worker'

@description('Optional. Fewest worker instances.')
param autoscaleMinimumCapacity int = 1

@description('Optional. Most worker instances.')
param autoscaleMaximumCapacity int = 3

@description('Optional. The plan\'s instance count now (0 on a first deployment): kept within the autoscale bounds, so a redeployment does not reset a scaled-out plan to the minimum.')
@minValue(0)
param appServicePlanCurrentCapacity int = 0

@description('Optional. The handler module the worker runs and `sbinbox migrate` migrates (SBINBOX_HANDLERS), relative to the deployed package.')
param handlersModule string = './dist-handlers/index.js'

@description('Optional. Average ActiveMessages above which a worker instance is added.')
param autoscaleScaleOutThreshold int = 100

@description('Optional. Publishers (upstream identities) that get Azure Service Bus Data Sender on the queue, or with topicName on the topic.')
param publishers publisherType[] = []

@description('Optional. Object ID of an upstream App Service\'s managed identity that runs the outbox relay (sbinbox relay, or startRelay in-process). It gets Azure Service Bus Data Sender on the queue, or with topicName on the topic, and nothing else: the relay only sends.')
param outboxRelayPrincipalId string?

@description('Optional. With privateNetwork: address prefix of a subnet for GitHub-hosted runners with Azure private networking (delegated to GitHub.Network/networkSettings), for the migrate step inside the VNet; empty for none (docs/deploy.md, "Where migrate runs").')
param runnerSubnetPrefix string = ''

@description('Optional. With privateNetwork: resource IDs of virtual networks (a self-hosted runner\'s, peered with this one) to link to the private DNS zones of Azure SQL and Service Bus.')
param runnerVirtualNetworkIds string[] = []

@description('Optional. Private network (on for prod): the worker\'s outbound traffic through a virtual network, Azure SQL and Service Bus reached through private endpoints only (public network access off; Service Bus is then Premium whatever serviceBusSkuName says, as Standard has no private endpoints), and the worker\'s site refusing every request from outside. The post-provision step (sbinbox migrate) must then run from inside the network: docs/deploy.md.')
param privateNetwork bool = false

@description('Optional. An e-mail address that gets the operations alerts (docs/operations.md). Ignored when alertActionGroupId is set.')
param alertEmail string = ''

@description('Optional. Resource ID of an existing action group (your on-call tool) that the operations alerts notify instead.')
param alertActionGroupId string = ''

@description('Optional. The URL of docs/operations.md in your repository (e.g. https://github.com/OWNER/REPO/blob/main/docs/operations.md): each alert links to its section there.')
param alertRunbookUrl string = 'docs/operations.md'

@description('Optional. Require alert routing (on in prod): the deployment then fails with AlertRoutingMissing unless alertEmail or alertActionGroupId is set, and with AlertRunbookUrlNotAbsolute unless alertRunbookUrl is an https:// URL, so no prod alert fires unseen or links nowhere.')
param requireAlertRouting bool = false

@description('Optional. Days the Log Analytics workspace keeps every log, the SQL audit and the Service Bus audit included (30 to 730).')
@minValue(30)
@maxValue(730)
param logRetentionInDays int = 30

@description('Optional. Zone redundancy (on in prod) for the database and the App Service plan (which then needs at least two instances). The region must offer availability zones for both.')
param zoneRedundant bool = false

@description('Optional. For a serverless database (GP_S_...): minutes idle before it pauses, -1 for never (prod: a paused database answers the first login after a pause with error 40613 for up to a minute). Ignored on other SKUs.')
param sqlAutoPauseDelayMinutes int = 60

@description('Optional. Microsoft Defender for SQL on the server (Advanced Threat Protection: alerts on SQL injection, unusual access, brute force). Billed per server.')
param defenderForSql bool = false

@description('Optional. DLQ console readers (docs/operations.md, "Signed-in operators in Azure"): Entra ID groups whose members sign in with their own identity and may list the worker\'s dead letters and read their bodies: Azure Service Bus Data Receiver on the worker\'s queue. Empty: no assignment.')
param dlqReaders operatorType[] = []

@description('Optional. DLQ console operators: may also replay, edit-and-retry, purge and restore: Data Receiver and Data Sender on the worker\'s queue and Storage Blob Data Contributor on the dead-letter archive\'s container. Empty: no assignment.')
param dlqOperators operatorType[] = []

@description('Optional. With privateNetwork: Azure Bastion and a Linux jump VM with Entra ID login inside the VNet, from which the readers and operators run `sbinbox console` against the private endpoints (docs/operations.md, "Reaching prod\'s private namespace"). Off by default.')
param operatorAccess bool = false

@description('Optional. With operatorAccess: the SSH public key of the jump VM\'s break-glass local account (operators sign in with Entra ID). Not a secret.')
param operatorVmAdminPublicKey string = ''

@description('Optional. With operatorAccess: address prefix of the jump VM\'s subnet.')
param operatorSubnetPrefix string = '10.60.4.0/27'

@description('An operator group of the DLQ console (groups only: the deploy identity\'s ABAC condition pins operator roles to listed group ids, scripts/rbac-condition.ts).')
type operatorType = {
  @description('Required. Object ID of the group.')
  principalId: string

  @description('Optional. Kind of principal (Group by default).')
  principalType: 'Group'?
}

@description('A principal allowed to publish to the queue.')
type publisherType = {
  @description('Required. Object ID of the principal.')
  principalId: string

  @description('Optional. Kind of principal.')
  principalType: ('ServicePrincipal' | 'User' | 'Group')?
}

var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
  application: 'sbinbox'
}
// The worker refuses to start unless an inbox row outlives every redelivery (design: lock x deliveries + TTL + margin).
var inboxRetentionHours = messageTimeToLiveHours + (lockDurationSeconds * maxDeliveryCount) / 3600 + 1 + inboxRetentionMarginHours
var subscriptionNames = topicName == null ? [] : union([consumerName], otherSubscriptionNames)
// With a topic, the service queue the Service Bus module creates for consumerName.
var workerQueueName = topicName == null ? queueName : consumerName
var appName = 'app-sbinbox-${resourceToken}'
var sqlServerName = 'sql-sbinbox-${resourceToken}'
var sqlDatabaseName = 'sbinbox'
var serviceBusNamespaceName = 'sb-sbinbox-${resourceToken}'
var applicationInsightsName = 'appi-sbinbox-${resourceToken}'
var logAnalyticsWorkspaceName = 'log-sbinbox-${resourceToken}'
var workerIdentityName = 'id-sbinbox-worker-${resourceToken}'
var publicNetworkAccess = privateNetwork ? 'Disabled' : 'Enabled'
var archiveAccountName = 'stsbinbox${resourceToken}'
// Operator access is the way into the private network: without it there is nothing to reach, and a silent no-op
// would leave an operator who asked for it without a jump VM and no word why.
var withOperatorAccess = operatorAccess
  ? (privateNetwork
      ? true
      : fail('OperatorAccessWithoutPrivateNetwork: operatorAccess is on but privateNetwork is off: Bastion and the jump VM reach private endpoints; without the private network run the console from your own machine (docs/operations.md).'))
  : false
var checkedOperatorKey = !withOperatorAccess || !empty(operatorVmAdminPublicKey)
  ? operatorVmAdminPublicKey
  : fail('OperatorKeyMissing: operatorAccess is on but operatorVmAdminPublicKey is empty: the jump VM needs a break-glass SSH key (operators sign in with Entra ID; docs/deploy.md).')
// Named failures at deployment time (ARM's fail()), so a prod deployment cannot leave its alerts unrouted.
var alertRouted = !empty(alertEmail) || !empty(alertActionGroupId)
var runbookAbsolute = startsWith(toLower(alertRunbookUrl), 'https://')
var checkedRunbookUrl = !requireAlertRouting
  ? alertRunbookUrl
  : !alertRouted
      ? fail('AlertRoutingMissing: requireAlertRouting is on but neither alertEmail nor alertActionGroupId is set, so the alerts would notify nobody (docs/deploy.md, "Before the first prod deployment").')
      : !runbookAbsolute
          ? fail('AlertRunbookUrlNotAbsolute: alertRunbookUrl must be an https:// URL of docs/operations.md (e.g. https://github.com/OWNER/REPO/blob/main/docs/operations.md), so the alerts\' links are clickable; got \'${alertRunbookUrl}\'.')
          : alertRunbookUrl
// A start command that does not run the worker from the package would leave App Service restarting something else
// with no word why: refused by name at deployment time instead.
var checkedAppCommandLine = startsWith(appCommandLine, 'node ') && endsWith(appCommandLine, ' bin/sbinbox.js worker')
  ? appCommandLine
  : fail('AppCommandLineNotWorker: appCommandLine must be \'node [flags] bin/sbinbox.js worker\' (the worker from the deployed package, Node and V8 flags before the entry; docs/deploy.md); got \'${appCommandLine}\'.')
// The first deployment starts at the minimum; later ones keep what autoscale chose.
var planCapacity = appServicePlanCurrentCapacity > 0
  ? min(max(appServicePlanCurrentCapacity, autoscaleMinimumCapacity), autoscaleMaximumCapacity)
  : autoscaleMinimumCapacity

module serviceBus '../bicep/modules/servicebus/main.bicep' = {
  // The diagnostic setting names the workspace.
  dependsOn: [
    monitoring
  ]
  params: {
    name: serviceBusNamespaceName
    location: location
    tags: tags
    skuName: privateNetwork ? 'Premium' : serviceBusSkuName
    publicNetworkAccess: publicNetworkAccess
    queueName: queueName
    topicName: topicName
    subscriptionNames: subscriptionNames
    queueRequiresSession: topicName == null && requiresSession
    sessionSubscriptionNames: topicName != null && requiresSession ? [consumerName] : []
    duplicateDetectionHistoryTimeWindow: duplicateDetectionHistoryTimeWindow
    lockDuration: 'PT${lockDurationSeconds}S'
    maxDeliveryCount: maxDeliveryCount
    defaultMessageTimeToLive: 'PT${messageTimeToLiveHours}H'
    logAnalyticsWorkspaceName: logAnalyticsWorkspaceName
  }
}

module monitoring '../bicep/modules/monitoring/main.bicep' = {
  params: {
    logAnalyticsWorkspaceName: logAnalyticsWorkspaceName
    applicationInsightsName: applicationInsightsName
    location: location
    tags: tags
    retentionInDays: logRetentionInDays
  }
}

module worker '../bicep/modules/appservice/main.bicep' = {
  dependsOn: [
    monitoring
  ]
  params: {
    name: appName
    planName: 'plan-sbinbox-${resourceToken}'
    identityName: workerIdentityName
    location: location
    tags: tags
    planSkuName: appServicePlanSkuName
    planCapacity: planCapacity
    logAnalyticsWorkspaceName: logAnalyticsWorkspaceName
    linuxFxVersion: linuxFxVersion
    appCommandLine: checkedAppCommandLine
    applicationInsightsName: applicationInsightsName
    virtualNetworkSubnetId: privateNetwork ? network!.outputs.appSubnetId : null
    denyPublicInbound: privateNetwork
    zoneRedundant: zoneRedundant
    appSettings: {
      SBINBOX_SERVICEBUS_NAMESPACE: serviceBus.outputs.fullyQualifiedNamespace
      // The queue, or with a topic the worker's own queue, which its subscription forwards to.
      SBINBOX_QUEUE: workerQueueName
      SBINBOX_CONSUMER: consumerName
      SBINBOX_HANDLERS: handlersModule
      SBINBOX_DATABASE: 'sqlserver'
      SBINBOX_SQLSERVER_SERVER: '${sqlServerName}${environment().suffixes.sqlServerHostname}'
      SBINBOX_SQLSERVER_DATABASE: sqlDatabaseName
      SBINBOX_MAX_CONCURRENT_CALLS: string(maxConcurrentCalls)
      SBINBOX_MAX_CONCURRENT_SESSIONS: requiresSession ? string(maxConcurrentSessions) : '0'
      // The queue's own settings, so the worker can check its inbox retention outlives every redelivery.
      SBINBOX_QUEUE_LOCK_DURATION_MS: string(lockDurationSeconds * 1000)
      SBINBOX_QUEUE_MAX_DELIVERY_COUNT: string(maxDeliveryCount)
      SBINBOX_QUEUE_MESSAGE_TTL_HOURS: string(messageTimeToLiveHours)
      SBINBOX_RETENTION_HOURS: string(inboxRetentionHours)
      // The same deployment grants the worker's roles, and Azure RBAC says a role assignment can take up to 30
      // minutes to take effect: start-up retries a refusal (access denied) for 45 before it exits (docs/deploy.md).
      SBINBOX_STARTUP_LIMIT_MS: '2700000'
      OTEL_SERVICE_NAME: 'sbinbox-worker'
    }
  }
}

module sql '../bicep/modules/sql/main.bicep' = {
  // The audit's diagnostic setting names the workspace.
  dependsOn: [
    monitoring
  ]
  params: {
    name: sqlServerName
    location: location
    tags: tags
    administratorLogin: sqlAdministratorLogin
    administratorObjectId: sqlAdministratorObjectId
    administratorPrincipalType: sqlAdministratorPrincipalType
    databaseName: sqlDatabaseName
    databaseSkuName: sqlDatabaseSkuName
    databaseMaxSizeGb: sqlDatabaseMaxSizeGb
    logAnalyticsWorkspaceName: logAnalyticsWorkspaceName
    // Only the worker's own outbound addresses, not "all of Azure" and never the internet; none on a private network.
    allowedIpAddresses: privateNetwork ? [] : worker.outputs.possibleOutboundIpAddresses
    publicNetworkAccess: publicNetworkAccess
    zoneRedundant: zoneRedundant
    autoPauseDelayMinutes: sqlAutoPauseDelayMinutes
    defenderForSql: defenderForSql
  }
}

module network '../bicep/modules/network/main.bicep' = if (privateNetwork) {
  params: {
    name: 'vnet-sbinbox-${resourceToken}'
    location: location
    tags: tags
    runnerSubnetPrefix: runnerSubnetPrefix
    linkedVirtualNetworkIds: runnerVirtualNetworkIds
    operatorSubnetPrefix: operatorAccess ? operatorSubnetPrefix : ''
  }
}

module sqlEndpoint '../bicep/modules/network/private-endpoint.bicep' = if (privateNetwork) {
  params: {
    name: 'pe-${sqlServerName}'
    location: location
    tags: tags
    subnetId: network!.outputs.endpointSubnetId
    targetResourceId: sql.outputs.resourceId
    groupId: 'sqlServer'
    dnsZoneId: network!.outputs.sqlDnsZoneId
  }
}

// The site's own endpoint (the app and its SCM/Kudu host): with the site's public network access off, the zip deploy
// reaches Kudu only through it, from a runner inside the VNet (or a peered, linked one).
module siteEndpoint '../bicep/modules/network/private-endpoint.bicep' = if (privateNetwork) {
  params: {
    name: 'pe-${appName}'
    location: location
    tags: tags
    subnetId: network!.outputs.endpointSubnetId
    targetResourceId: worker.outputs.resourceId
    groupId: 'sites'
    dnsZoneId: network!.outputs.sitesDnsZoneId
  }
}

module serviceBusEndpoint '../bicep/modules/network/private-endpoint.bicep' = if (privateNetwork) {
  params: {
    name: 'pe-${serviceBusNamespaceName}'
    location: location
    tags: tags
    subnetId: network!.outputs.endpointSubnetId
    targetResourceId: serviceBus.outputs.resourceId
    groupId: 'namespace'
    dnsZoneId: network!.outputs.serviceBusDnsZoneId
  }
}

// Where a purge writes what it removes first (docs/operations.md, "The archive"): Entra ID only, the operators'.
module archive '../bicep/modules/archive/main.bicep' = {
  // The diagnostic setting names the workspace.
  dependsOn: [
    monitoring
  ]
  params: {
    logAnalyticsWorkspaceName: logAnalyticsWorkspaceName
    name: archiveAccountName
    location: location
    tags: tags
    skuName: zoneRedundant ? 'Standard_ZRS' : 'Standard_LRS'
    publicNetworkAccess: publicNetworkAccess
    writers: dlqOperators
  }
}

module archiveEndpoint '../bicep/modules/network/private-endpoint.bicep' = if (privateNetwork) {
  params: {
    name: 'pe-${archiveAccountName}'
    location: location
    tags: tags
    subnetId: network!.outputs.endpointSubnetId
    targetResourceId: archive.outputs.resourceId
    groupId: 'blob'
    dnsZoneId: network!.outputs.blobDnsZoneId
  }
}

// The console's readers and operators, each acting with their own Entra ID identity on the worker's queue only.
module operators '../bicep/modules/operators/main.bicep' = {
  // The queue is the Service Bus module's.
  dependsOn: [
    serviceBus
  ]
  params: {
    namespaceName: serviceBusNamespaceName
    queueName: workerQueueName
    readers: dlqReaders
    operators: dlqOperators
  }
}

module operatorJumpbox '../bicep/modules/jumpbox/main.bicep' = if (withOperatorAccess) {
  params: {
    name: 'sbinbox-${resourceToken}'
    location: location
    tags: tags
    bastionSubnetId: network!.outputs.bastionSubnetId
    vmSubnetId: network!.outputs.operatorSubnetId
    adminPublicKey: checkedOperatorKey
    operators: union(dlqReaders, dlqOperators)
  }
}

module roles '../bicep/modules/identity/main.bicep' = {
  // No explicit dependsOn: the worker's principal already orders this after the worker, which follows the namespace
  // and the monitoring module (whose component the telemetry role is scoped to).
  params: {
    namespaceName: serviceBusNamespaceName
    queueName: workerQueueName
    topicName: topicName
    // The identity exists only once the app does, so this is a runtime value by nature; what-if shows the role as
    // "may change" until the first deployment, which is the price of naming it guid(scope, principal, role).
    #disable-next-line what-if-short-circuiting
    receiverPrincipalId: worker.outputs.principalId
    senders: concat(
      publishers,
      outboxRelayPrincipalId == null ? [] : [{ principalId: outboxRelayPrincipalId!, principalType: 'ServicePrincipal' }]
    )
    // Monitoring Metrics Publisher: the component accepts only Entra ID tokens.
    applicationInsightsName: applicationInsightsName
  }
}

module autoscale '../bicep/modules/autoscale/main.bicep' = {
  params: {
    name: 'autoscale-sbinbox-${resourceToken}'
    location: location
    tags: tags
    planResourceId: worker.outputs.planResourceId
    namespaceResourceId: serviceBus.outputs.resourceId
    // The worker's own queue: a backlog of another service's does not scale this one.
    queueName: workerQueueName
    minimumCapacity: autoscaleMinimumCapacity
    maximumCapacity: autoscaleMaximumCapacity
    defaultCapacity: autoscaleMinimumCapacity
    scaleOutThreshold: autoscaleScaleOutThreshold
  }
}

// The operator's view (docs/operations.md): a workbook on the component and the alert rules.
module workbook '../bicep/modules/workbook/main.bicep' = {
  // The workbook is attached to the component by name.
  dependsOn: [
    monitoring
  ]
  params: {
    location: location
    tags: tags
    applicationInsightsName: applicationInsightsName
    namespaceResourceId: serviceBus.outputs.resourceId
  }
}

module alerts '../bicep/modules/alerts/main.bicep' = {
  params: {
    namePrefix: 'sbinbox-${environmentName}'
    location: location
    tags: tags
    applicationInsightsResourceId: monitoring.outputs.applicationInsightsResourceId
    namespaceResourceId: serviceBus.outputs.resourceId
    // The worker's own queue: with a topic its subscription forwards there, dead-letters included (docs/topics.md).
    entityName: workerQueueName
    webAppResourceId: worker.outputs.resourceId
    alertEmail: alertEmail
    existingActionGroupId: alertActionGroupId
    runbookUrl: checkedRunbookUrl
  }
}

// The alerts that cover the rest of the failures (issue 39), as resources of their own beside the module above.
module alertCoverage '../bicep/modules/alerts/coverage.bicep' = {
  params: {
    namePrefix: 'sbinbox-${environmentName}'
    location: location
    tags: tags
    applicationInsightsResourceId: monitoring.outputs.applicationInsightsResourceId
    namespaceResourceId: serviceBus.outputs.resourceId
    entityName: workerQueueName
    sqlDatabaseResourceId: sql.outputs.databaseResourceId
    actionGroupIds: alerts.outputs.actionGroupIds
    runbookUrl: checkedRunbookUrl
  }
}

// Upper-case names: azd turns outputs into environment variables for the post-provision hook.
@description('The resource group of the environment.')
output AZURE_RESOURCE_GROUP string = resourceGroup().name

@description('The name of the worker\'s web app.')
output WORKER_APP_NAME string = worker.outputs.name

@description('The name of the App Service plan (the deployment reads its instance count before redeploying).')
output APP_SERVICE_PLAN_NAME string = 'plan-sbinbox-${resourceToken}'

@description('The worker\'s managed identity: its name is the database user\'s name.')
output WORKER_IDENTITY_NAME string = worker.outputs.identityName

@description('The client ID of the worker\'s managed identity: the database user is created from it, with no Graph lookup.')
output WORKER_IDENTITY_CLIENT_ID string = worker.outputs.identityClientId

@description('The Service Bus namespace, fully qualified.')
output SERVICEBUS_NAMESPACE string = serviceBus.outputs.fullyQualifiedNamespace

@description('The resource ID of the worker\'s queue (scope for extra role assignments); with a topic, its own queue, consumerName.')
output SERVICEBUS_QUEUE_RESOURCE_ID string = serviceBus.outputs.?queueResourceId ?? '${serviceBus.outputs.resourceId}/queues/${workerQueueName}'

@description('The worker\'s queue name; with a topic, its own queue, consumerName.')
output SERVICEBUS_QUEUE string = workerQueueName

@description('Whether the environment is on the private network: the post-provision step then opens no firewall rule.')
output PRIVATE_NETWORK bool = privateNetwork

@description('With privateNetwork and runnerSubnetPrefix: the runner subnet\'s resource ID, for the GitHub.Network/networkSettings resource (docs/deploy.md); empty otherwise.')
output RUNNER_SUBNET_ID string = privateNetwork ? network!.outputs.runnerSubnetId : ''

@description('The SQL server name.')
output SQL_SERVER_NAME string = sql.outputs.name

@description('The SQL server host name.')
output SQL_SERVER_FQDN string = sql.outputs.fullyQualifiedDomainName

@description('The database name.')
output SQL_DATABASE_NAME string = sql.outputs.databaseName

@description('The dead-letter archive\'s container URL (no key, no SAS: the operators write it with their Entra ID identity), for `sbinbox console --archive-url` and `sbinbox dlq purge|restore --archive-url`.')
output ARCHIVE_CONTAINER_URL string = archive.outputs.containerUrl

@description('With operatorAccess: the Bastion\'s name, for `az network bastion ssh --name`; empty otherwise.')
output OPERATOR_BASTION_NAME string = withOperatorAccess ? operatorJumpbox!.outputs.bastionName : ''

@description('With operatorAccess: the jump VM\'s resource ID, for `az network bastion ssh --target-resource-id`; empty otherwise.')
output OPERATOR_JUMP_VM_ID string = withOperatorAccess ? operatorJumpbox!.outputs.vmResourceId : ''
