metadata name = 'Operator roles on the worker\'s queue'
metadata description = 'The DLQ console\'s operators, signed in with their own Entra ID identity: readers get Azure Service Bus Data Receiver on the worker\'s queue (peek, and so the bodies, of its dead-letter queue), operators get Data Receiver and Data Sender (replay sends a copy; purge receives and completes). Scoped to the queue, never the namespace.'

@description('Required. Name of the Service Bus namespace that holds the queue.')
param namespaceName string

@description('Required. Name of the worker\'s queue (with a topic, its own queue): its dead-letter queue is a sub-queue, covered by a role on the queue.')
param queueName string

@description('Optional. Readers: may list dead letters and read their bodies (masked by the console for the fields the handler marks personal).')
param readers principalType[] = []

@description('Optional. Operators: may also replay, edit-and-retry and purge.')
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
var dataReceiverRoleId = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0' // Azure Service Bus Data Receiver
var dataSenderRoleId = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39' // Azure Service Bus Data Sender

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: namespaceName

  resource queue 'queues' existing = {
    name: queueName
  }
}

// A principal listed as both gets one receiver assignment (the same name would be declared twice otherwise).
var receivers = union(readers, operators)

resource receiverRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for principal in receivers: {
    name: guid(namespace::queue.id, principal.principalId, dataReceiverRoleId)
    scope: namespace::queue
    properties: {
      principalId: principal.principalId
      principalType: principal.?principalType ?? 'Group'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataReceiverRoleId)
      description: 'sbinbox console operator: peeks at (and, as an operator, settles) dead letters of this queue.'
    }
  }
]

resource senderRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for principal in operators: {
    name: guid(namespace::queue.id, principal.principalId, dataSenderRoleId)
    scope: namespace::queue
    properties: {
      principalId: principal.principalId
      principalType: principal.?principalType ?? 'Group'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataSenderRoleId)
      description: 'sbinbox console operator: replays and restores dead letters to this queue.'
    }
  }
]

@description('How many receiver and sender assignments were made.')
output assignmentCount int = length(receivers) + length(operators)
