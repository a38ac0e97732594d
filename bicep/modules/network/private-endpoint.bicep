metadata name = 'Private endpoint'
metadata description = 'A private endpoint for one resource (an Azure SQL server, a Service Bus namespace or a web app) in a subnet, registered in its private DNS zone.'

@description('Required. Name of the private endpoint.')
param name string

@description('Optional. Location of the private endpoint (the virtual network\'s).')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Required. Resource ID of the subnet the endpoint takes its address from.')
param subnetId string

@description('Required. Resource ID of the resource the endpoint connects to.')
param targetResourceId string

@description('Required. Private link sub-resource: sqlServer for Azure SQL, namespace for Service Bus, sites for a web app (its SCM host included), blob for the blobs of a storage account.')
@allowed([
  'sqlServer'
  'namespace'
  'sites'
  'blob'
])
param groupId string

@description('Required. Resource ID of the private DNS zone that gets the endpoint\'s A record.')
param dnsZoneId string

resource endpoint 'Microsoft.Network/privateEndpoints@2025-05-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    subnet: {
      id: subnetId
    }
    privateLinkServiceConnections: [
      {
        name: name
        properties: {
          privateLinkServiceId: targetResourceId
          groupIds: [
            groupId
          ]
        }
      }
    ]
  }
}

// The zone group keeps the A record in step with the endpoint's address (created, changed and deleted with it).
resource dnsZoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2025-05-01' = {
  parent: endpoint
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [
      {
        name: last(split(dnsZoneId, '/'))
        properties: {
          privateDnsZoneId: dnsZoneId
        }
      }
    ]
  }
}

@description('The resource ID of the private endpoint.')
output resourceId string = endpoint.id
