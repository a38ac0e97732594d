metadata name = 'Dead-letter archive'
metadata description = 'A storage account with one blob container, where a console or `sbinbox dlq` purge (or edit-and-retry) writes each dead letter before it deletes it, and from which `sbinbox dlq restore` sends it back. Entra ID only (shared keys off), TLS 1.2, no anonymous access, blob versioning and soft delete; the operators get Storage Blob Data Contributor on the container alone.'

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
      }
    }
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
