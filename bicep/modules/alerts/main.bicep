metadata name = 'Operations alerts'
metadata description = 'Alert rules for sbinbox (dead-letters, an outage pause, no instance ready, a silent Service Bus link, health checks failing, retries exhausted, stale outbox rows, a queue not drained) and an optional e-mail action group.'

@description('Required. Prefix of the rules\' names.')
param namePrefix string

@description('Required. Resource ID of the Application Insights component the worker (and the relay) send telemetry to.')
param applicationInsightsResourceId string

@description('Required. Resource ID of the Service Bus namespace.')
param namespaceResourceId string

@description('Required. The worker\'s queue (with a topic, its own queue, where its subscription forwards), whose dead-letter count is watched (the EntityName dimension).')
param entityName string

@description('Required. Resource ID of the worker\'s web app (its health-check metric).')
param webAppResourceId string

@description('Optional. Location of the log alert rules (the metric alerts and the action group are global).')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Optional. An e-mail address that gets every alert: creates an action group for it. Ignored when existingActionGroupId is set.')
param alertEmail string = ''

@description('Optional. Resource ID of an existing action group to notify instead (your on-call tool). With neither, the rules fire in the portal only.')
param existingActionGroupId string = ''

@description('Optional. An outage pause (the database unreachable) longer than this many seconds raises an alert.')
@minValue(1)
param outagePauseAlertSeconds int = 300

@description('Optional. Minutes without a completed message, while the queue holds messages, before an alert (a metric alert\'s window: one of these).')
@allowed([5, 15, 30, 60, 360, 720, 1440])
param idleAlertMinutes int = 15

@description('Optional. Requests Service Bus throttled (ServerBusy) in 15 minutes, namespace-wide, above which an alert fires. The clients retry each one, so a few are harmless; many for a quarter of an hour mean the namespace runs past its credits (Standard) or its messaging units (Premium).')
@minValue(1)
param throttledAlertThreshold int = 100

@description('Optional. Where the rules\' descriptions point: docs/operations.md, best as your repository\'s URL of it so the links in a notification are clickable.')
param runbookUrl string = 'docs/operations.md'

// Generated from src/telemetry/names.ts by scripts/monitoring.ts; test/infra/monitoring.test.ts keeps it current.
var queries = loadJsonContent('queries.json')
var createGroup = empty(existingActionGroupId) && !empty(alertEmail)
var actionGroupIds = !empty(existingActionGroupId)
  ? [existingActionGroupId]
  : createGroup ? [actionGroup.id] : []
// Metric alerts take these windows only (ISO 8601 durations).
var idleWindows = {
  '5': 'PT5M'
  '15': 'PT15M'
  '30': 'PT30M'
  '60': 'PT1H'
  '360': 'PT6H'
  '720': 'PT12H'
  '1440': 'PT24H'
}
var metricActions = [for id in actionGroupIds: { actionGroupId: id }]
var logActions = {
  actionGroups: actionGroupIds
}

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (createGroup) {
  name: '${namePrefix}-ag'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'sbinbox'
    enabled: true
    emailReceivers: [
      {
        name: 'operator'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

resource deadLetterCount 'Microsoft.Insights/metricAlerts@2026-01-01' = {
  name: '${namePrefix}-dead-letters-present'
  location: 'global'
  tags: tags
  properties: {
    description: 'Messages are in ${entityName}\'s dead-letter queue: they were not applied and wait for an operator. See which reasons with `sbinbox dlq list` or `sbinbox console`, fix the cause, then replay or purge: ${runbookUrl}#dead-letters-present'
    severity: 2
    enabled: true
    scopes: [
      namespaceResourceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'DeadletteredMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                entityName
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    autoMitigate: true
    actions: metricActions
  }
}

resource healthCheck 'Microsoft.Insights/metricAlerts@2026-01-01' = {
  name: '${namePrefix}-health-check-failing'
  location: 'global'
  tags: tags
  properties: {
    description: 'App Service\'s health check (/healthz) fails on every worker instance: no process answers, so nothing is received. Look at the log stream and the last deployment: ${runbookUrl}#health-check-failing'
    severity: 1
    enabled: true
    scopes: [
      webAppResourceId
    ]
    evaluationFrequency: 'PT1M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'HealthCheckStatus'
          metricNamespace: 'Microsoft.Web/sites'
          metricName: 'HealthCheckStatus'
          // The best instance's value: below 1 only while no instance passes (whether the metric counts 0..1 or 0..100).
          operator: 'LessThan'
          threshold: 1
          timeAggregation: 'Maximum'
        }
      ]
    }
    autoMitigate: true
    actions: metricActions
  }
}

// Service Bus does not export its metrics to logs with the entity dimension (ActiveMessages not at all), so this is a
// metric alert on the namespace: both criteria on the worker's queue, both must hold for the whole window.
resource queueNotDrained 'Microsoft.Insights/metricAlerts@2026-01-01' = {
  name: '${namePrefix}-queue-not-drained'
  location: 'global'
  tags: tags
  properties: {
    description: '${entityName} held messages for ${idleAlertMinutes} minutes and none was completed: the workers are stopped, stuck, or cannot receive. Check /readyz and the log: ${runbookUrl}#queue-not-drained'
    severity: 1
    enabled: true
    scopes: [
      namespaceResourceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: idleWindows[string(idleAlertMinutes)]
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'ActiveMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'ActiveMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                entityName
              ]
            }
          ]
          // The fewest of the window above 0: the queue never emptied.
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Minimum'
        }
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'CompleteMessage'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'CompleteMessage'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                entityName
              ]
            }
          ]
          operator: 'LessThan'
          threshold: 1
          timeAggregation: 'Total'
        }
      ]
    }
    autoMitigate: true
    actions: metricActions
  }
}

// Throttling is the namespace's (Standard's credits, Premium's messaging units are shared by every entity), so this
// watches the namespace's ThrottledRequests without an entity dimension. A new resource beside the others: it takes
// the same actions as they do, however the action groups are wired.
resource throttledRequests 'Microsoft.Insights/metricAlerts@2026-01-01' = {
  name: '${namePrefix}-throttled-requests'
  location: 'global'
  tags: tags
  properties: {
    description: 'Service Bus throttled more than ${throttledAlertThreshold} requests (ServerBusy) in 15 minutes. Nothing is lost (each is retried, settlements by lock token, within the lock and the duplicate window), but work slows: find who spends the credits, then spread the load, or move to Premium or add messaging units: ${runbookUrl}#throttled-requests'
    severity: 2
    enabled: true
    scopes: [
      namespaceResourceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'ThrottledRequests'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'ThrottledRequests'
          operator: 'GreaterThan'
          threshold: throttledAlertThreshold
          timeAggregation: 'Total'
        }
      ]
    }
    autoMitigate: true
    actions: metricActions
  }
}

var logRules = [
  {
    key: 'deadLettered'
    name: 'dead-lettered-by-reason'
    displayName: 'sbinbox: messages dead-lettered, by reason'
    description: 'The worker dead-lettered messages in the last 15 minutes (one alert per reason). The reason names what went wrong: fix it, then replay the group: ${runbookUrl}#dead-lettered-by-reason'
    severity: 2
    scope: applicationInsightsResourceId
    window: 'PT15M'
    measure: 'deadLettered'
    aggregation: 'Total'
    threshold: 0
    dimensions: [
      {
        name: 'reason'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
  }
  {
    key: 'outagePause'
    name: 'outage-pause'
    displayName: 'sbinbox: receiving paused for a database outage'
    description: 'The worker paused receiving for longer than ${outagePauseAlertSeconds} s because the database did not answer. Messages wait safely in the queue; look at the database: ${runbookUrl}#outage-pause'
    severity: 2
    scope: applicationInsightsResourceId
    window: 'PT15M'
    measure: 'longestSeconds'
    aggregation: 'Maximum'
    threshold: outagePauseAlertSeconds
    dimensions: []
  }
  {
    key: 'notReady'
    name: 'not-ready-anywhere'
    displayName: 'sbinbox: /readyz failing on every instance'
    description: 'No worker instance was ready (/readyz 503: receiver detached, Service Bus link silent, database not answering, or still starting) for 10 minutes. Nothing is processed; /readyz\'s state words say which dependency: ${runbookUrl}#not-ready-anywhere'
    severity: 1
    scope: applicationInsightsResourceId
    window: 'PT10M'
    measure: ''
    aggregation: 'Count'
    threshold: 0
    dimensions: [
      {
        name: 'cloud_RoleName'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
  }
  {
    key: 'serviceBusSilent'
    name: 'service-bus-silent'
    displayName: 'sbinbox: the Service Bus link went silent'
    description: 'A worker instance heard nothing from Service Bus (no message, no settlement answer, no probe answer) for longer than its bound: its link is silent and it is not ready. The instance reconnects by itself; if it stays silent, check the network and the namespace: ${runbookUrl}#service-bus-silent'
    severity: 2
    scope: applicationInsightsResourceId
    window: 'PT10M'
    measure: 'silentSeconds'
    aggregation: 'Maximum'
    threshold: 0
    dimensions: [
      {
        name: 'cloud_RoleInstance'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
  }
  {
    key: 'retriesExhausted'
    name: 'retries-exhausted'
    displayName: 'sbinbox: retries exhausted'
    description: 'Messages failed every retry and were dead-lettered as RetriesExhausted: a dependency is down or a handler fails. Fix it, then replay with `sbinbox dlq replay --reason RetriesExhausted`: ${runbookUrl}#retries-exhausted'
    severity: 2
    scope: applicationInsightsResourceId
    window: 'PT15M'
    measure: 'exhausted'
    aggregation: 'Total'
    threshold: 0
    dimensions: []
  }
  {
    key: 'outboxStale'
    name: 'outbox-stale'
    displayName: 'sbinbox: stale outbox rows'
    description: 'The relay holds outbox rows first tried longer ago than the duplicate-detection window: it will not send them, because a copy may already be on the queue. An operator decides: ${runbookUrl}#outbox-stale'
    severity: 2
    scope: applicationInsightsResourceId
    window: 'PT15M'
    measure: 'staleRows'
    aggregation: 'Maximum'
    threshold: 0
    dimensions: [
      {
        name: 'destination'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
  }
]

resource logAlerts 'Microsoft.Insights/scheduledQueryRules@2026-03-01' = [
  for rule in logRules: {
    name: '${namePrefix}-${rule.name}'
    location: location
    tags: tags
    kind: 'LogAlert'
    properties: {
      displayName: rule.displayName
      description: rule.description
      severity: rule.severity
      enabled: true
      scopes: [
        rule.scope
      ]
      evaluationFrequency: 'PT5M'
      windowSize: rule.window
      criteria: {
        allOf: [
          {
            query: queries[rule.key]
            timeAggregation: rule.aggregation
            metricMeasureColumn: empty(rule.measure) ? null : rule.measure
            dimensions: rule.dimensions
            operator: 'GreaterThan'
            threshold: rule.threshold
            failingPeriods: {
              numberOfEvaluationPeriods: 1
              minFailingPeriodsToAlert: 1
            }
          }
        ]
      }
      autoMitigate: true
      actions: logActions
    }
  }
]

@description('The action group the rules notify, empty when none.')
output actionGroupIds string[] = actionGroupIds
