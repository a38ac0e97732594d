metadata name = 'App Service for the worker'
metadata description = 'A Linux App Service plan and a web app that runs the sbinbox worker with a user-assigned identity and no secrets.'

@description('Required. Name of the web app (globally unique).')
@minLength(2)
@maxLength(60)
param name string

@description('Required. Name of the App Service plan.')
param planName string

@description('Required. Name of the worker\'s user-assigned managed identity (also its database user name).')
param identityName string

@description('Optional. Value of the azd-service-name tag, the service in azure.yaml that `azd deploy` ships to this app.')
param azdServiceName string = 'worker'

@description('Optional. Name of the Log Analytics workspace, in this resource group, that receives the app\'s logs (console, HTTP, platform).')
param logAnalyticsWorkspaceName string?

resource workspace 'Microsoft.OperationalInsights/workspaces@2026-03-01' existing = if (logAnalyticsWorkspaceName != null) {
  name: logAnalyticsWorkspaceName ?? ''
}

@description('Optional. Location for all resources.')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Optional. SKU of the plan. Autoscale needs Standard (S1) or Premium (P0v3 and up).')
param planSkuName string = 'P0v3'

@description('Optional. Instances the plan has after this deployment: pass the current count on redeployments, or the deployment resets it until autoscale acts again.')
@minValue(1)
param planCapacity int = 1

@description('Optional. Node.js runtime (an LTS line).')
@allowed([
  'NODE|22-lts'
  'NODE|24-lts'
])
param linuxFxVersion string = 'NODE|22-lts'

@description('Optional. Command App Service runs to start the worker. A 4 MB semi-space keeps its resident memory flat while it drains a backlog (see the README benchmark); the old space is not capped.')
param appCommandLine string = 'node --max-semi-space-size=4 bin/sbinbox.js worker'

@description('Optional. Path App Service probes to decide an instance is healthy.')
param healthCheckPath string = '/healthz'

@description('Required. Name of the Application Insights component whose connection string the worker gets as a setting. The worker authenticates to it with its identity, which needs Monitoring Metrics Publisher on it.')
param applicationInsightsName string

@description('Optional. Worker settings (names to values). Never secrets: the managed identity is the credential.')
param appSettings object = {}

@description('Optional. Resource ID of a subnet delegated to Microsoft.Web/serverFarms: the worker\'s outbound traffic, all of it, then goes through the virtual network (to private endpoints). None when omitted.')
param virtualNetworkSubnetId string?

@description('Optional. Close the site and its deployment (SCM/Kudu) site to the internet: public network access off, and access restrictions with default action Deny and no rule on both, so they answer only through a private endpoint (the caller adds one). App Service\'s health check still reaches /healthz: its pings are sent to the site internally.')
param denyPublicInbound bool = false

@description('Optional. Spread the plan\'s instances over availability zones (needs at least two instances, Premium v3, and a region with zones).')
param zoneRedundant bool = false

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// A user-assigned identity, because its client ID is known as soon as it exists: the deployment creates the
// database user from it (CREATE USER ... WITH SID) without the SQL server looking the name up in Microsoft Graph.
resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  name: identityName
  location: location
  tags: tags
}

resource plan 'Microsoft.Web/serverfarms@2025-03-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'linux'
  sku: {
    name: planSkuName
    capacity: planCapacity
  }
  properties: {
    reserved: true
    zoneRedundant: zoneRedundant
  }
}

resource site 'Microsoft.Web/sites@2025-03-01' = {
  name: name
  location: location
  tags: union(tags, { 'azd-service-name': azdServiceName })
  kind: 'app,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identity.id}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    clientAffinityEnabled: false
    // With denyPublicInbound only a private endpoint reaches the site and Kudu (the zip deploy runs inside the VNet).
    publicNetworkAccess: denyPublicInbound ? 'Disabled' : 'Enabled'
    virtualNetworkSubnetId: virtualNetworkSubnetId
    siteConfig: {
      // A queue worker takes no requests: with denyPublicInbound nothing from outside reaches the app.
      ipSecurityRestrictionsDefaultAction: denyPublicInbound ? 'Deny' : 'Allow'
      // The zip deploy goes to the SCM site with the deployer's Entra token (basic credentials are off below); with
      // denyPublicInbound Kudu too refuses every address (private endpoint traffic is not subject to these rules).
      scmIpSecurityRestrictionsUseMain: false
      scmIpSecurityRestrictionsDefaultAction: denyPublicInbound ? 'Deny' : 'Allow'
      // With VNet integration, every outbound connection (not only RFC 1918 ones) goes through the subnet.
      vnetRouteAllEnabled: virtualNetworkSubnetId != null
      linuxFxVersion: linuxFxVersion
      appCommandLine: appCommandLine
      // A queue consumer has no incoming traffic to keep it awake.
      alwaysOn: true
      healthCheckPath: healthCheckPath
      ftpsState: 'Disabled'
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      http20Enabled: true
    }
  }
}

resource siteSettings 'Microsoft.Web/sites/config@2025-03-01' = {
  parent: site
  name: 'appsettings'
  properties: union(appSettings, {
    // Read from the resource here so the value never appears as a parameter or an output.
    APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsights.properties.ConnectionString
    // Telemetry is sent with the identity's token (the component accepts no instrumentation key).
    APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'Authorization=AAD;ClientId=${identity.properties.clientId}'
    // DefaultAzureCredential's managed identity credential takes the user-assigned identity from AZURE_CLIENT_ID,
    // for Service Bus and Azure SQL alike.
    AZURE_CLIENT_ID: identity.properties.clientId
    // The deployment ships node_modules (npm ci --omit=dev), so Oryx must not rebuild it.
    SCM_DO_BUILD_DURING_DEPLOYMENT: 'false'
  })
}

// Publishing goes through Entra ID (az webapp deploy with the deployer's token), never basic credentials.
resource ftpPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2025-03-01' = {
  parent: site
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2025-03-01' = {
  parent: site
  name: 'scm'
  properties: {
    allow: false
  }
}

// The newest version of the type; the only GA one (2016-09-01) predates category groups.
#disable-next-line use-recent-api-versions
resource diagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (logAnalyticsWorkspaceName != null) {
  name: 'to-log-analytics'
  scope: site
  properties: {
    workspaceId: workspace.id
    // Every category the site offers (console and application output, HTTP, platform), however that list grows.
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

@description('The name of the web app.')
output name string = site.name

@description('The resource ID of the web app.')
output resourceId string = site.id

@description('The principal (object) ID of the worker\'s identity, for role assignments.')
output principalId string = identity.properties.principalId

@description('The client ID of the worker\'s identity, from which its database user is created.')
output identityClientId string = identity.properties.clientId

@description('The name of the worker\'s identity, which is also its database user name.')
output identityName string = identity.name

@description('The resource ID of the App Service plan.')
output planResourceId string = plan.id

@description('The default host name of the web app.')
output defaultHostName string = site.properties.defaultHostName

@description('Every outbound IPv4 address the web app may use, for firewall rules.')
output possibleOutboundIpAddresses string[] = split(site.properties.possibleOutboundIpAddresses, ',')
