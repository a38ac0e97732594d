metadata name = 'Azure SQL logical server and database'
metadata description = 'An Azure SQL server that accepts only Entra ID authentication, one database, and firewall rules for named addresses only.'

@description('Required. Name of the logical server (globally unique, lowercase).')
@minLength(1)
@maxLength(63)
param name string

@description('Optional. Location for all resources.')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Required. Display name of the Entra ID user or group that administers the server.')
param administratorLogin string

@description('Required. Object ID of that Entra ID user or group.')
param administratorObjectId string

@description('Optional. Kind of principal the administrator is.')
@allowed([
  'User'
  'Group'
  'Application'
])
param administratorPrincipalType string = 'Group'

@description('Optional. Entra ID tenant of the administrator.')
param administratorTenantId string = subscription().tenantId

@description('Required. Name of the database.')
param databaseName string

@description('Optional. SKU of the database, for example Basic, S0, GP_S_Gen5_1.')
param databaseSkuName string = 'Basic'

@description('Optional. Maximum size of the database in GB (within what the SKU allows: Basic 2, S0 up to 250, vCore tiers more).')
@minValue(1)
param databaseMaxSizeGb int = 2

@description('Optional. Name of the Log Analytics workspace, in this resource group, that receives the server\'s audit log.')
param logAnalyticsWorkspaceName string?

resource workspace 'Microsoft.OperationalInsights/workspaces@2026-03-01' existing = if (logAnalyticsWorkspaceName != null) {
  name: logAnalyticsWorkspaceName ?? ''
}

@description('Optional. IPv4 addresses allowed through the firewall, one rule each (for example the web app\'s possible outbound addresses). Never a range.')
param allowedIpAddresses string[] = []

@description('Optional. Public endpoint of the server: Disabled when it is reached through a private endpoint only (the firewall rules then admit nothing).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Optional. Zone-redundant database (the SKU and the region must support it).')
param zoneRedundant bool = false

@description('Optional. For a serverless SKU (GP_S_...): minutes idle before the database pauses, -1 for never. Ignored on other SKUs.')
param autoPauseDelayMinutes int = 60

@description('Optional. Microsoft Defender for SQL (Advanced Threat Protection) on the server.')
param defenderForSql bool = false

var serverless = startsWith(databaseSkuName, 'GP_S_')

resource server 'Microsoft.Sql/servers@2025-01-01' = {
  name: name
  location: location
  tags: tags
  // No server identity: the worker's database user is created from its client ID (CREATE USER ... WITH SID, TYPE = E),
  // so the server never looks a name up in Microsoft Graph (docs/deploy.md, "The worker's database user").
  properties: {
    minimalTlsVersion: '1.2'
    publicNetworkAccess: publicNetworkAccess
    administrators: {
      administratorType: 'ActiveDirectory'
      azureADOnlyAuthentication: true
      login: administratorLogin
      sid: administratorObjectId
      principalType: administratorPrincipalType
      tenantId: administratorTenantId
    }
  }
}

resource database 'Microsoft.Sql/servers/databases@2025-01-01' = {
  parent: server
  name: databaseName
  location: location
  tags: tags
  sku: {
    name: databaseSkuName
  }
  properties: {
    maxSizeBytes: databaseMaxSizeGb * 1024 * 1024 * 1024
    zoneRedundant: zoneRedundant
    autoPauseDelay: serverless ? autoPauseDelayMinutes : null
  }
}

resource threatProtection 'Microsoft.Sql/servers/advancedThreatProtectionSettings@2025-01-01' = if (defenderForSql) {
  parent: server
  name: 'Default'
  properties: {
    state: 'Enabled'
  }
}

// Server-level auditing to Azure Monitor: every database, including logins and permission changes. The events
// travel through the master database's diagnostic setting (SQLSecurityAuditEvents), as the auditing API requires.
resource auditing 'Microsoft.Sql/servers/auditingSettings@2025-01-01' = if (logAnalyticsWorkspaceName != null) {
  parent: server
  name: 'default'
  properties: {
    state: 'Enabled'
    isAzureMonitorTargetEnabled: true
  }
}

resource master 'Microsoft.Sql/servers/databases@2025-01-01' existing = {
  parent: server
  name: 'master'
}

// The newest version of the type (see the App Service module).
#disable-next-line use-recent-api-versions
resource auditDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (logAnalyticsWorkspaceName != null) {
  name: 'audit-to-log-analytics'
  scope: master
  dependsOn: [
    auditing
  ]
  properties: {
    workspaceId: workspace.id
    logs: [
      {
        category: 'SQLSecurityAuditEvents'
        enabled: true
      }
    ]
  }
}

// One rule per single address: no rule ever spans a range, let alone the whole internet.
resource firewallRules 'Microsoft.Sql/servers/firewallRules@2025-01-01' = [
  for (address, index) in allowedIpAddresses: {
    parent: server
    name: 'allow-${index}'
    properties: {
      startIpAddress: address
      endIpAddress: address
    }
  }
]

@description('The name of the server.')
output name string = server.name

@description('The resource ID of the server.')
output resourceId string = server.id

@description('The fully qualified domain name of the server.')
output fullyQualifiedDomainName string = server.properties.fullyQualifiedDomainName

@description('The name of the database.')
output databaseName string = database.name

@description('The resource ID of the database.')
output databaseResourceId string = database.id
