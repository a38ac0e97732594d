metadata name = 'Private network for the worker'
metadata description = 'A virtual network with a subnet delegated to App Service (the worker\'s outbound VNet integration) and a subnet for private endpoints, and the private DNS zones of Azure SQL and Service Bus linked to it.'

@description('Required. Name of the virtual network.')
param name string

@description('Optional. Location of the virtual network (the DNS zones are global).')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Optional. Address space of the virtual network.')
param addressPrefix string = '10.60.0.0/16'

@description('Optional. Subnet the App Service plan integrates with (outbound only; delegated to Microsoft.Web/serverFarms, /26 or larger).')
param appSubnetPrefix string = '10.60.0.0/24'

@description('Optional. Subnet that holds the private endpoints of Azure SQL and Service Bus.')
param endpointSubnetPrefix string = '10.60.1.0/24'

@description('Optional. Subnet for GitHub-hosted runners with Azure private networking (delegated to GitHub.Network/networkSettings), where the migrate step can run inside this VNet; empty for none. It is one of the VNet\'s inline subnets, because a subnet added by hand to a VNet declared with inline subnets is removed by the next deployment (Azure/bicep#4653).')
param runnerSubnetPrefix string = ''

@description('Optional. Resource IDs of other virtual networks (a self-hosted runner\'s, peered with this one) to link to both private DNS zones, so that the servers\' names resolve to the private endpoints there too.')
param linkedVirtualNetworkIds string[] = []

@description('Optional. Private DNS zone of Service Bus private endpoints (Azure public cloud\'s by default).')
param serviceBusDnsZoneName string = 'privatelink.servicebus.windows.net'

// privatelink.database.windows.net in the public cloud, the sovereign clouds' own suffix elsewhere.
var sqlDnsZoneName = 'privatelink${environment().suffixes.sqlServerHostname}'

resource vnet 'Microsoft.Network/virtualNetworks@2025-05-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    addressSpace: {
      addressPrefixes: [
        addressPrefix
      ]
    }
    subnets: concat(
      [
        {
          name: 'app'
          properties: {
            addressPrefix: appSubnetPrefix
            delegations: [
              {
                name: 'app-service'
                properties: {
                  serviceName: 'Microsoft.Web/serverFarms'
                }
              }
            ]
          }
        }
        {
          name: 'endpoints'
          properties: {
            addressPrefix: endpointSubnetPrefix
          }
        }
      ],
      empty(runnerSubnetPrefix)
        ? []
        : [
            {
              name: 'runner'
              properties: {
                addressPrefix: runnerSubnetPrefix
                delegations: [
                  {
                    name: 'github-runners'
                    properties: {
                      serviceName: 'GitHub.Network/networkSettings'
                    }
                  }
                ]
              }
            }
          ]
    )
  }
}

resource zones 'Microsoft.Network/privateDnsZones@2024-06-01' = [
  for zone in [sqlDnsZoneName, serviceBusDnsZoneName]: {
    name: zone
    location: 'global'
    tags: tags
  }
]

// Without the link the worker resolves the servers' public names to their public addresses, which refuse it.
resource links 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = [
  for (zone, index) in [sqlDnsZoneName, serviceBusDnsZoneName]: {
    parent: zones[index]
    name: '${name}-link'
    location: 'global'
    tags: tags
    properties: {
      registrationEnabled: false
      virtualNetwork: {
        id: vnet.id
      }
    }
  }
]

// A runner in another (peered) VNet resolves through that VNet's own DNS: it needs its own link to each zone.
resource sqlZoneExtraLinks 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = [
  for (vnetId, i) in linkedVirtualNetworkIds: {
    parent: zones[0]
    name: '${last(split(vnetId, '/'))}-${uniqueString(vnetId)}'
    location: 'global'
    tags: tags
    properties: {
      registrationEnabled: false
      virtualNetwork: {
        id: linkedVirtualNetworkIds[i]
      }
    }
  }
]

resource serviceBusZoneExtraLinks 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = [
  for (vnetId, i) in linkedVirtualNetworkIds: {
    parent: zones[1]
    name: '${last(split(vnetId, '/'))}-${uniqueString(vnetId)}'
    location: 'global'
    tags: tags
    properties: {
      registrationEnabled: false
      virtualNetwork: {
        id: linkedVirtualNetworkIds[i]
      }
    }
  }
]

@description('The resource ID of the virtual network.')
output resourceId string = vnet.id

@description('The resource ID of the subnet the App Service plan integrates with.')
output appSubnetId string = resourceId('Microsoft.Network/virtualNetworks/subnets', vnet.name, 'app')

@description('The resource ID of the subnet that holds the private endpoints.')
output endpointSubnetId string = resourceId('Microsoft.Network/virtualNetworks/subnets', vnet.name, 'endpoints')

@description('The resource ID of the runner subnet (for the GitHub.Network/networkSettings resource), empty without one.')
output runnerSubnetId string = empty(runnerSubnetPrefix)
  ? ''
  : resourceId('Microsoft.Network/virtualNetworks/subnets', vnet.name, 'runner')

@description('The resource ID of the Azure SQL private DNS zone.')
output sqlDnsZoneId string = zones[0].id

@description('The resource ID of the Service Bus private DNS zone.')
output serviceBusDnsZoneId string = zones[1].id
