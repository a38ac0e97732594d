metadata name = 'Worker and publisher role assignments'
metadata description = 'Least-privilege data-plane roles: on the worker\'s queue, Data Receiver and Data Sender (its scheduled retries and replays) for the worker; Data Sender for each publisher on that queue, or with a topic on the topic (the worker gets no right on the topic); optionally Monitoring Metrics Publisher for the worker on an Application Insights component.'

@description('Required. Name of the Service Bus namespace that holds the queue.')
param namespaceName string

@description('Required. Name of the queue the worker receives from (with a topic, its own queue, which its subscription forwards to).')
param queueName string

@description('Optional. Name of the topic the publishers send to; without it they get Data Sender on the queue.')
param topicName string?

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

@description('Optional. Name of an Application Insights component in this resource group on which the worker gets Monitoring Metrics Publisher, to send telemetry with its identity when local authentication is off.')
param applicationInsightsName string?

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
// Despite its name it covers all telemetry (Microsoft.Insights/Telemetry/Write), not only metrics.
var metricsPublisherRoleId = '3913510d-42f4-4e42-8a64-420c390055eb' // Monitoring Metrics Publisher

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: namespaceName

  resource queue 'queues' existing = {
    name: queueName
  }
}

resource topic 'Microsoft.ServiceBus/namespaces/topics@2026-01-01' existing = if (topicName != null) {
  parent: namespace
  name: topicName ?? 'unused'
}

var onTopic = topicName != null

// Publishers send to the topic; the worker needs nothing on it: its subscription forwards to its queue.
resource topicSenderRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for sender in senders: if (onTopic) {
    name: guid(topic.id, sender.principalId, dataSenderRoleId)
    scope: topic
    properties: {
      principalId: sender.principalId
      principalType: sender.?principalType ?? 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataSenderRoleId)
      description: 'Publishes events to this topic.'
    }
  }
]

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

// A retry that does not fit under the lock, and `sbinbox dlq replay`, are copies scheduled or sent to the queue: sends.
// Without this role a failure lasting past the in-place waits ends in an Unauthorized send instead of a retry.
resource queueRetrySenderRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(namespace::queue.id, receiverPrincipalId, dataSenderRoleId)
  scope: namespace::queue
  properties: {
    principalId: receiverPrincipalId
    principalType: receiverPrincipalType
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataSenderRoleId)
    description: 'sbinbox worker schedules its retries on this queue.'
  }
}

resource senderRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for sender in senders: if (!onTopic) {
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

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = if (applicationInsightsName != null) {
  name: applicationInsightsName ?? ''
}

resource telemetryPublisherRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (applicationInsightsName != null) {
  name: guid(applicationInsights.id, receiverPrincipalId, metricsPublisherRoleId)
  scope: applicationInsights
  properties: {
    principalId: receiverPrincipalId
    principalType: receiverPrincipalType
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', metricsPublisherRoleId)
    description: 'sbinbox worker sends its traces and metrics to this component with its identity.'
  }
}

@description('The resource ID of the worker\'s receiver role assignment (on its queue).')
output receiverRoleAssignmentId string = receiverRole.id

@description('The resource IDs of the publishers\' role assignments (on the queue, or on the topic).')
output senderRoleAssignmentIds string[] = [
  for (sender, index) in senders: onTopic ? topicSenderRoles[index].id : senderRoles[index].id
]

@description('The resource ID of the worker\'s telemetry role assignment, when a component was named.')
output telemetryPublisherRoleAssignmentId string? = applicationInsightsName != null ? telemetryPublisherRole.id : null
