metadata name = 'Service Bus namespace, queue and optional topic'
metadata description = 'A Service Bus namespace that accepts only Entra ID tokens, one queue with duplicate detection for the inbox worker (without a topic), or a topic with duplicate detection and, per consuming service, a queue of its own with duplicate detection fed by a subscription that forwards to it.'

@description('Required. Name of the Service Bus namespace (globally unique, 6-50 characters).')
@minLength(6)
@maxLength(50)
param name string

@description('Optional. Location for all resources.')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Optional. Pricing tier. Duplicate detection needs Standard or Premium, so Basic is not offered.')
@allowed([
  'Standard'
  'Premium'
])
param skuName string = 'Standard'

@description('Optional. Messaging units, used only by the Premium tier.')
@allowed([
  1
  2
  4
  8
  16
])
param premiumMessagingUnits int = 1

@description('Required. Name of the queue the worker consumes without a topic; with topicName no such queue is created (each service has its own, subscriptionNames).')
@minLength(1)
@maxLength(260)
param queueName string

@description('Optional. How long the broker remembers a MessageId to drop a resend (ISO 8601 duration, 20 seconds to 7 days).')
param duplicateDetectionHistoryTimeWindow string = 'PT10M'

@description('Optional. Peek-lock duration (ISO 8601 duration, at most 5 minutes).')
param lockDuration string = 'PT1M'

@description('Optional. Deliveries before the broker dead-letters a message.')
@minValue(1)
@maxValue(2000)
param maxDeliveryCount int = 10

@description('Optional. Time to live of a message that sets none (ISO 8601 duration).')
param defaultMessageTimeToLive string = 'P14D'

@description('Optional. Move expired messages to the dead-letter queue instead of dropping them.')
param deadLetteringOnMessageExpiration bool = true

@description('Optional. Sessions on the queue (requiresSession): every message must carry a session id, and the worker runs in session mode. Cannot be changed after the queue exists.')
param queueRequiresSession bool = false

@description('Optional. The consuming services (of subscriptionNames) whose own queue requires sessions; their subscriptions forward to it. Cannot be changed after the queue exists.')
param sessionSubscriptionNames string[] = []

@description('Optional. Name of a topic with duplicate detection, for events with several consuming services; none when omitted.')
@minLength(1)
@maxLength(260)
param topicName string?

@description('Optional. The consuming services of the topic, one name each: each gets a queue of that name (duplicate detection on, the queue settings above) and a subscription of that name with the default true filter that forwards every event to it (forwardTo). The service\'s worker receives from its queue and sends its retries and replays there, so no other subscription on the topic ever sees them.')
param subscriptionNames string[] = []

@description('Optional. Public endpoint of the namespace: Disabled when it is reached through a private endpoint only (Premium only: Standard has no private endpoints).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Optional. Name of the Log Analytics workspace, in this resource group, that receives the namespace\'s logs and metrics.')
param logAnalyticsWorkspaceName string?

resource workspace 'Microsoft.OperationalInsights/workspaces@2026-03-01' existing = if (logAnalyticsWorkspaceName != null) {
  name: logAnalyticsWorkspaceName ?? ''
}

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: skuName
    tier: skuName
    capacity: skuName == 'Premium' ? premiumMessagingUnits : null
  }
  properties: {
    // Entra ID only: no SAS keys, so no connection string can leak.
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: publicNetworkAccess
  }
}

// Without a topic only: with one, each service's worker consumes its own queue (serviceQueues), and this one would
// sit unused, taking a name in the namespace.
resource queue 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = if (topicName == null) {
  parent: namespace
  name: queueName
  properties: {
    // Cannot be switched on after the queue exists: the publisher's stable MessageId relies on it.
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionHistoryTimeWindow
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    defaultMessageTimeToLive: defaultMessageTimeToLive
    deadLetteringOnMessageExpiration: deadLetteringOnMessageExpiration
    requiresSession: queueRequiresSession
    enablePartitioning: false
  }
}

resource topic 'Microsoft.ServiceBus/namespaces/topics@2026-01-01' = if (topicName != null) {
  parent: namespace
  name: topicName ?? 'unused'
  properties: {
    // As on the queue: the publisher's stable MessageId relies on it, and it cannot be switched on later.
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionHistoryTimeWindow
    defaultMessageTimeToLive: defaultMessageTimeToLive
    enablePartitioning: false
  }
}

// Each consuming service's own queue: what its worker receives from, where its retries and replays go, what its
// autoscale reads. Its settings are the ones that count; the subscription only forwards.
resource serviceQueues 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = [
  for subscriptionName in subscriptionNames: if (topicName != null) {
    parent: namespace
    name: subscriptionName
    properties: {
      // As on the queue above: it drops a forwarded resend and a retry scheduled twice, and cannot be switched on later.
      requiresDuplicateDetection: true
      duplicateDetectionHistoryTimeWindow: duplicateDetectionHistoryTimeWindow
      lockDuration: lockDuration
      maxDeliveryCount: maxDeliveryCount
      defaultMessageTimeToLive: defaultMessageTimeToLive
      deadLetteringOnMessageExpiration: deadLetteringOnMessageExpiration
      // A session-enabled service receives its events in order per session id from its own queue; the subscription
      // that forwards to it needs no sessions itself.
      requiresSession: contains(sessionSubscriptionNames, subscriptionName)
      enablePartitioning: false
    }
  }
]

// Forwarding (learn.microsoft.com, "Chaining Service Bus entities with autoforwarding"): Service Bus moves each
// message the subscription gets to the service's queue, MessageId and properties kept. The default true filter
// Service Bus creates stays: no rule of sbinbox's is needed, since no copy of sbinbox's ever reaches the topic. The
// destination must exist first; naming it through the queue resource orders the two.
resource subscriptions 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2026-01-01' = [
  for (subscriptionName, index) in subscriptionNames: if (topicName != null) {
    parent: topic
    name: subscriptionName
    properties: {
      forwardTo: serviceQueues[index].name
      // A message the subscription cannot forward (the queue is full) is dead-lettered here; this forwards it on to
      // the queue once there is space (Azure/azure-service-bus#666), where the worker and `sbinbox dlq` find it.
      forwardDeadLetteredMessagesTo: serviceQueues[index].name
      maxDeliveryCount: maxDeliveryCount
      defaultMessageTimeToLive: defaultMessageTimeToLive
      deadLetteringOnMessageExpiration: deadLetteringOnMessageExpiration
      requiresSession: false
    }
  }
]

// The newest version of the type; the only GA one (2016-09-01) predates category groups.
#disable-next-line use-recent-api-versions
resource diagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (logAnalyticsWorkspaceName != null) {
  name: 'to-log-analytics'
  scope: namespace
  properties: {
    workspaceId: workspace.id
    // Operational logs (entity changes), runtime audit and VNet logs where the tier has them.
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

@description('The name of the namespace.')
output name string = namespace.name

@description('The resource ID of the namespace.')
output resourceId string = namespace.id

@description('The fully qualified host name of the namespace, as the SDK takes it.')
output fullyQualifiedNamespace string = split(replace(namespace.properties.serviceBusEndpoint, 'https://', ''), ':')[0]

@description('The name of the queue, without a topic.')
output queueName string? = topicName == null ? queue.name : null

@description('The resource ID of the queue, without a topic.')
output queueResourceId string? = topicName == null ? queue.id : null

@description('The name of the topic, when one was asked for.')
output topicName string? = topicName != null ? topic.name : null

@description('The resource ID of the topic, when one was asked for.')
output topicResourceId string? = topicName != null ? topic.id : null
