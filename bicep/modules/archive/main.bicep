metadata name = 'Dead-letter archive'
metadata description = 'A storage account with one blob container, where a console or `sbinbox dlq` purge (or edit-and-retry) writes each dead letter before it deletes it, and from which `sbinbox dlq restore` sends it back. Entra ID only (shared keys off), TLS 1.2, no anonymous access, blob versioning, soft delete and version-level immutability, its reads, writes and deletes logged to Log Analytics; the operators get Storage Blob Data Contributor on the container alone.'

@description('Required. Name of the storage account (3 to 24 lower-case letters and digits).')
@minLength(3)
@maxLength(24)
param name string

@description('Optional. Location of the account.')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Optional. Name of the container that holds the archived messages.')
param containerName string = 'dlq-archive'

@description('Optional. Redundancy of the account (ZRS where the region has zones).')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
])
param skuName string = 'Standard_LRS'

@description('Optional. Public network access: Disabled on the private network, where the account is reached through its private endpoint only.')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Optional. Days a deleted or overwritten archived message stays recoverable (blob soft delete, and the container\'s own).')
@minValue(1)
@maxValue(365)
param deleteRetentionDays int = 30

@description('Optional. Days each archived message is immutable after it is written (a version-level time-based retention policy, the container\'s default, unlocked): no one with a data role, the operators included, can delete or overwrite it before. 0: none.')
@minValue(0)
@maxValue(3650)
param immutabilityDays int = 30

@description('Optional. Name of the Log Analytics workspace (in this resource group) that receives the container\'s reads, writes and deletes (StorageRead, StorageWrite, StorageDelete). Null: no diagnostic setting.')
param logAnalyticsWorkspaceName string?

@description('Optional. Operators (Entra ID groups) who purge and restore: Storage Blob Data Contributor on the container.')
param writers principalType[] = []

@export()
@description('An Entra ID principal: a group (preferred: membership, and PIM for Groups, are managed in Entra) or a user.')
type principalType = {
  @description('Required. Object ID of the group.')
  principalId: string

  @description('Optional. Kind of principal.')
  principalType: 'Group'?
}

// Built-in role definition (the same ID in every tenant).
var blobDataContributorRoleId = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe' // Storage Blob Data Contributor

resource account 'Microsoft.Storage/storageAccounts@2025-06-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    // Entra ID only: no account key or key-signed SAS works, so every write is the operator's own identity.
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      defaultAction: publicNetworkAccess == 'Disabled' ? 'Deny' : 'Allow'
      bypass: 'None'
    }
  }

  resource blobs 'blobServices' = {
    name: 'default'
    properties: {
      // An archived message overwritten or deleted by mistake is kept as a version or soft-deleted blob.
      isVersioningEnabled: true
      deleteRetentionPolicy: {
        enabled: true
        days: deleteRetentionDays
      }
      containerDeleteRetentionPolicy: {
        enabled: true
        days: deleteRetentionDays
      }
    }

    resource container 'containers' = {
      name: containerName
      properties: {
        publicAccess: 'None'
        // Version-level immutability (account versioning is on): each archived message can be held by the default
        // policy below. Settable at creation only; an existing container is migrated (docs/operations.md).
        immutableStorageWithVersioning: {
          enabled: immutabilityDays > 0
        }
      }

      // Tamper-evident: a Storage Blob Data Contributor can delete a blob, but not one under retention. Unlocked, so
      // an Owner can still shorten it or delete the container once empty; locking it (irreversible) is a
      // compliance decision left to the bank (docs/operations.md, "The archive in Azure").
      resource retention 'immutabilityPolicies' = if (immutabilityDays > 0) {
        name: 'default'
        properties: {
          immutabilityPeriodSinceCreationInDays: immutabilityDays
        }
      }
    }
  }
}

resource workspace 'Microsoft.OperationalInsights/workspaces@2026-03-01' existing = if (logAnalyticsWorkspaceName != null) {
  name: logAnalyticsWorkspaceName!
}

// Who wrote, read or deleted which archived message, under which identity, in the workspace with the console's own
// audit. The newest version of the type; the only GA one (2016-09-01) predates category groups.
#disable-next-line use-recent-api-versions
resource diagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (logAnalyticsWorkspaceName != null) {
  name: 'to-log-analytics'
  scope: account::blobs
  properties: {
    workspaceId: workspace.id
    logs: [
      {
        category: 'StorageRead'
        enabled: true
      }
      {
        category: 'StorageWrite'
        enabled: true
      }
      {
        category: 'StorageDelete'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'Transaction'
        enabled: true
      }
    ]
  }
}

// On the container, not the account: the operators read and write the archive and nothing else in it.
resource writerRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for writer in writers: {
    name: guid(account::blobs::container.id, writer.principalId, blobDataContributorRoleId)
    scope: account::blobs::container
    properties: {
      principalId: writer.principalId
      principalType: writer.?principalType ?? 'Group'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataContributorRoleId)
      description: 'sbinbox operators archive purged dead letters here and restore them.'
    }
  }
]

@description('The resource ID of the storage account.')
output resourceId string = account.id

@description('The name of the storage account.')
output name string = account.name

@description('The container\'s URL, for `sbinbox console --archive-url` and `sbinbox dlq purge|restore` (no key, no SAS).')
output containerUrl string = '${account.properties.primaryEndpoints.blob}${containerName}'
