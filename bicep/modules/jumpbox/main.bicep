metadata name = 'Operator access to the private network'
metadata description = 'Azure Bastion (Standard, native-client tunnelling) and a Linux jump VM without a public address, with Microsoft Entra ID SSH login (AADSSHLoginForLinux): each operator signs in to the VM with their own Entra ID identity and runs `sbinbox console` there, which reaches the private endpoints through the VNet and its linked private DNS zones. The operators get Virtual Machine User Login on the VM and Reader on the VM, its NIC and the Bastion, the roles Bastion\'s native client needs.'

@description('Required. Name prefix of the resources.')
param name string

@description('Optional. Location of the resources.')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Required. Resource ID of AzureBastionSubnet.')
param bastionSubnetId string

@description('Required. Resource ID of the subnet the jump VM is in.')
param vmSubnetId string

@description('Optional. Size of the jump VM (the console and the Azure CLI: 2 vCPU, 4 GiB is ample; AADSSHLoginForLinux needs at least 1 GiB).')
param vmSize string = 'Standard_B2s'

@description('Required. SSH public key of the VM\'s break-glass local account (operators sign in with Entra ID, never with it; password login is off).')
@minLength(1)
param adminPublicKey string

@description('Optional. Name of that local account.')
param adminUsername string = 'sbinboxadmin'

@description('Optional. Principals (Entra ID groups) who may sign in to the jump VM: the console\'s readers and operators.')
param operators principalType[] = []

@export()
@description('An Entra ID group (the deploy identity\'s ABAC condition admits operator roles to listed groups only: scripts/rbac-condition.ts).')
type principalType = {
  @description('Required. Object ID of the group.')
  principalId: string

  @description('Optional. Kind of principal.')
  principalType: 'Group'?
}

// Built-in role definitions (IDs are the same in every tenant).
var vmUserLoginRoleId = 'fb879df8-f326-4884-b1cf-06f3ad86be52' // Virtual Machine User Login
var readerRoleId = 'acdd72a7-3385-48ef-bd42-f606fba81ae7' // Reader

resource bastionAddress 'Microsoft.Network/publicIPAddresses@2025-05-01' = {
  name: 'pip-${name}-bastion'
  location: location
  tags: tags
  sku: {
    name: 'Standard'
  }
  properties: {
    publicIPAllocationMethod: 'Static'
  }
}

// Standard: the native client (`az network bastion ssh --auth-type AAD`, `az network bastion tunnel`) needs it.
resource bastion 'Microsoft.Network/bastionHosts@2025-05-01' = {
  name: 'bas-${name}'
  location: location
  tags: tags
  sku: {
    name: 'Standard'
  }
  properties: {
    enableTunneling: true
    ipConfigurations: [
      {
        name: 'default'
        properties: {
          subnet: {
            id: bastionSubnetId
          }
          publicIPAddress: {
            id: bastionAddress.id
          }
        }
      }
    ]
  }
}

resource nic 'Microsoft.Network/networkInterfaces@2025-05-01' = {
  name: 'nic-${name}-jump'
  location: location
  tags: tags
  properties: {
    ipConfigurations: [
      {
        name: 'default'
        properties: {
          privateIPAllocationMethod: 'Dynamic'
          subnet: {
            id: vmSubnetId
          }
        }
      }
    ]
  }
}

resource vm 'Microsoft.Compute/virtualMachines@2025-04-01' = {
  name: 'vm-${name}-jump'
  location: location
  tags: tags
  // Entra ID login for Linux needs the VM's system-assigned identity.
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    hardwareProfile: {
      vmSize: vmSize
    }
    osProfile: {
      computerName: 'sbinbox-jump'
      adminUsername: adminUsername
      linuxConfiguration: {
        disablePasswordAuthentication: true
        ssh: {
          publicKeys: [
            {
              path: '/home/${adminUsername}/.ssh/authorized_keys'
              keyData: adminPublicKey
            }
          ]
        }
      }
    }
    storageProfile: {
      imageReference: {
        publisher: 'Canonical'
        offer: '0001-com-ubuntu-server-jammy'
        sku: '22_04-lts-gen2'
        version: 'latest'
      }
      osDisk: {
        createOption: 'FromImage'
        managedDisk: {
          storageAccountType: 'StandardSSD_LRS'
        }
      }
    }
    networkProfile: {
      networkInterfaces: [
        {
          id: nic.id
        }
      ]
    }
  }

  resource entraLogin 'extensions' = {
    name: 'AADSSHLoginForLinux'
    location: location
    tags: tags
    properties: {
      publisher: 'Microsoft.Azure.ActiveDirectory'
      type: 'AADSSHLoginForLinux'
      typeHandlerVersion: '1.0'
      autoUpgradeMinorVersion: true
    }
  }
}

resource loginRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for principal in operators: {
    name: guid(vm.id, principal.principalId, vmUserLoginRoleId)
    scope: vm
    properties: {
      principalId: principal.principalId
      principalType: principal.?principalType ?? 'Group'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', vmUserLoginRoleId)
      description: 'sbinbox operators sign in to the jump VM with Entra ID, without administrator rights.'
    }
  }
]

resource vmReaderRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for principal in operators: {
    name: guid(vm.id, principal.principalId, readerRoleId)
    scope: vm
    properties: {
      principalId: principal.principalId
      principalType: principal.?principalType ?? 'Group'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', readerRoleId)
      description: 'Azure Bastion\'s native client reads the target VM.'
    }
  }
]

resource nicReaderRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for principal in operators: {
    name: guid(nic.id, principal.principalId, readerRoleId)
    scope: nic
    properties: {
      principalId: principal.principalId
      principalType: principal.?principalType ?? 'Group'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', readerRoleId)
      description: 'Azure Bastion\'s native client reads the target VM\'s NIC.'
    }
  }
]

resource bastionReaderRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for principal in operators: {
    name: guid(bastion.id, principal.principalId, readerRoleId)
    scope: bastion
    properties: {
      principalId: principal.principalId
      principalType: principal.?principalType ?? 'Group'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', readerRoleId)
      description: 'Azure Bastion\'s native client reads the Bastion.'
    }
  }
]

@description('The name of the Bastion, for `az network bastion ssh --name`.')
output bastionName string = bastion.name

@description('The resource ID of the jump VM, for `az network bastion ssh --target-resource-id`.')
output vmResourceId string = vm.id
