metadata name = 'Private network for the worker'
metadata description = 'A virtual network with a subnet delegated to App Service (the worker\'s outbound VNet integration), a subnet for private endpoints, optionally the operators\' jump VM subnet (with a NAT gateway) and AzureBastionSubnet, the private DNS zones of Azure SQL, Service Bus, App Service and blob storage linked to it, and a network security group on every subnet but Bastion\'s.'

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

@description('Optional. Operator access (docs/operations.md, "Reaching prod\'s private namespace"): address prefix of the subnet of the operators\' jump VM, which gets a NAT gateway for its outbound traffic (Entra ID sign-in, packages); empty for none.')
param operatorSubnetPrefix string = ''

@description('Optional. With operatorSubnetPrefix: address prefix of AzureBastionSubnet (/26 or larger), where Azure Bastion runs.')
param bastionSubnetPrefix string = '10.60.3.0/26'

@description('Optional. Private DNS zone of blob storage private endpoints (the dead-letter archive).')
param blobDnsZoneName string = 'privatelink.blob.${environment().suffixes.storage}'

@description('Optional. Resource IDs of other virtual networks (a self-hosted runner\'s, peered with this one) to link to both private DNS zones, so that the servers\' names resolve to the private endpoints there too.')
param linkedVirtualNetworkIds string[] = []

@description('Optional. Private DNS zone of Service Bus private endpoints (Azure public cloud\'s by default).')
param serviceBusDnsZoneName string = 'privatelink.servicebus.windows.net'

@description('Optional. Private DNS zone of web app private endpoints, which holds both the app\'s and its SCM (Kudu) host\'s records (Azure public cloud\'s by default).')
param sitesDnsZoneName string = 'privatelink.azurewebsites.net'

@description('Optional. Security rules of the runner subnet\'s network security group (for example the outbound rules GitHub lists for Azure private networking); none keeps Azure\'s default rules (inbound from the VNet only, outbound open).')
param runnerSecurityRules array = []

// privatelink.database.windows.net in the public cloud, the sovereign clouds' own suffix elsewhere.
var sqlDnsZoneName = 'privatelink${environment().suffixes.sqlServerHostname}'
var zoneNames = [sqlDnsZoneName, serviceBusDnsZoneName, sitesDnsZoneName, blobDnsZoneName]
var operatorAccess = !empty(operatorSubnetPrefix)

// One NSG per subnet, declared here: an NSG attached by hand to an inline subnet is detached by the next deployment,
// and rules belong in review like the rest of the template. Azure's default rules admit inbound traffic from the
// VNet only (and the load balancer's probes) and deny the rest; the endpoints subnet's NSG applies to the private
// endpoints because their network policies are on.
resource securityGroups 'Microsoft.Network/networkSecurityGroups@2025-05-01' = [
  for subnet in ['app', 'endpoints', 'runner', 'operators']: if ((subnet != 'runner' || !empty(runnerSubnetPrefix)) && (subnet != 'operators' || operatorAccess)) {
    name: 'nsg-${name}-${subnet}'
    location: location
    tags: tags
    properties: {
      securityRules: subnet == 'runner' ? runnerSecurityRules : []
    }
  }
]

// The jump VM has no public address; its way out (Entra ID sign-in, package feeds) is this NAT gateway.
resource natAddress 'Microsoft.Network/publicIPAddresses@2025-05-01' = if (operatorAccess) {
  name: 'pip-${name}-nat'
  location: location
  tags: tags
  sku: {
    name: 'Standard'
  }
  properties: {
    publicIPAllocationMethod: 'Static'
  }
}

resource natGateway 'Microsoft.Network/natGateways@2025-05-01' = if (operatorAccess) {
  name: 'ng-${name}-operators'
  location: location
  tags: tags
  sku: {
    name: 'Standard'
  }
  properties: {
    publicIpAddresses: [
      {
        id: natAddress.id
      }
    ]
  }
}

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
            networkSecurityGroup: {
              id: securityGroups[0].id
            }
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
            networkSecurityGroup: {
              id: securityGroups[1].id
            }
            privateEndpointNetworkPolicies: 'Enabled'
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
                networkSecurityGroup: {
                  id: securityGroups[2].id
                }
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
          ],
      !operatorAccess
        ? []
        : [
            {
              // No NSG here: Azure Bastion needs its own set of rules on this subnet, and an NSG without them breaks it.
              name: 'AzureBastionSubnet'
              properties: {
                addressPrefix: bastionSubnetPrefix
              }
            }
            {
              name: 'operators'
              properties: {
                addressPrefix: operatorSubnetPrefix
                networkSecurityGroup: {
                  id: securityGroups[3].id
                }
                natGateway: {
                  id: natGateway.id
                }
              }
            }
          ]
    )
  }
}

resource zones 'Microsoft.Network/privateDnsZones@2024-06-01' = [
  for zone in zoneNames: {
    name: zone
    location: 'global'
    tags: tags
  }
]

// Without the link the worker resolves the servers' public names to their public addresses, which refuse it.
resource links 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = [
  for (zone, index) in zoneNames: {
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

// The runner deploys the zip to Kudu through the site's private endpoint, so its VNet resolves the site's names too.
resource sitesZoneExtraLinks 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = [
  for (vnetId, i) in linkedVirtualNetworkIds: {
    parent: zones[2]
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

@description('The resource ID of the blob storage private DNS zone (the dead-letter archive).')
output blobDnsZoneId string = zones[3].id

@description('The resource ID of the operators\' subnet (the jump VM), empty without operator access.')
output operatorSubnetId string = operatorAccess ? resourceId('Microsoft.Network/virtualNetworks/subnets', vnet.name, 'operators') : ''

@description('The resource ID of AzureBastionSubnet, empty without operator access.')
output bastionSubnetId string = operatorAccess ? resourceId('Microsoft.Network/virtualNetworks/subnets', vnet.name, 'AzureBastionSubnet') : ''

@description('The resource ID of the web apps\' private DNS zone (privatelink.azurewebsites.net).')
output sitesDnsZoneId string = zones[2].id
