metadata name = 'Service Bus role assignments'
metadata description = 'Least-privilege data-plane roles on one queue: Data Receiver for the worker, Data Sender for each publisher.'

@description('Required. Name of the Service Bus namespace that holds the queue.')
param namespaceName string

@description('Required. Name of the queue the roles are scoped to.')
param queueName string

@description('Required. Principal ID of the worker\'s managed identity; it gets Azure Service Bus Data Receiver.')
param receiverPrincipalId string

@description('Optional. Kind of principal the worker is.')
@allowed([
  'ServicePrincipal'
  'User'
  'Group'
])
param receiverPrincipalType string = 'ServicePrincipal'

@description('Optional. Publishers that get Azure Service Bus Data Sender on the queue.')
param senders senderType[] = []

@export()
@description('A principal allowed to send to the queue.')
type senderType = {
  @description('Required. Object ID of the principal (an upstream app\'s managed identity, a group or a user).')
  principalId: string

  @description('Optional. Kind of principal.')
  principalType: ('ServicePrincipal' | 'User' | 'Group')?
}

// Built-in role definitions (IDs are the same in every tenant).
var dataReceiverRoleId = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0' // Azure Service Bus Data Receiver
var dataSenderRoleId = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39' // Azure Service Bus Data Sender

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: namespaceName

  resource queue 'queues' existing = {
    name: queueName
  }
}

resource receiverRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(namespace::queue.id, receiverPrincipalId, dataReceiverRoleId)
  scope: namespace::queue
  properties: {
    principalId: receiverPrincipalId
    principalType: receiverPrincipalType
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataReceiverRoleId)
    description: 'sbinbox worker receives and settles messages on this queue.'
  }
}

resource senderRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for sender in senders: {
    name: guid(namespace::queue.id, sender.principalId, dataSenderRoleId)
    scope: namespace::queue
    properties: {
      principalId: sender.principalId
      principalType: sender.?principalType ?? 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataSenderRoleId)
      description: 'Publishes events to this queue.'
    }
  }
]

@description('The resource ID of the worker\'s role assignment.')
output receiverRoleAssignmentId string = receiverRole.id

@description('The resource IDs of the publishers\' role assignments.')
output senderRoleAssignmentIds string[] = [for (sender, index) in senders: senderRoles[index].id]
