// The alerts beside main.bicep's that cover the failures an on-call engineer meets (issue 39): new dead letters as
// they arrive, Service Bus server errors, a queue near its size quota, Azure SQL's health, processing time, failed
// settlements, and workers that send no telemetry. New resources only: main.bicep's rules are left as they are.
// Metric names: Microsoft.ServiceBus/namespaces and Microsoft.Sql/servers/databases in Azure Monitor's supported
// metrics; the KQL reads the names src/telemetry/names.ts defines (test/infra/alert-coverage.test.ts checks both).

@description('Required. Prefix of the alert rules\' names.')
param namePrefix string

@description('Required. The Application Insights component the workers send telemetry to.')
param applicationInsightsResourceId string

@description('Required. The Service Bus namespace.')
param namespaceResourceId string

@description('Required. The worker\'s queue (with a topic, the service\'s own queue).')
param entityName string

@description('Optional. The queue\'s size quota in megabytes (its maxSizeInMegabytes).')
param queueMaxSizeMegabytes int = 1024

@description('Required. The Azure SQL database the workers write to.')
param sqlDatabaseResourceId string

@description('Optional. The action groups to notify (main.bicep\'s output).')
param actionGroupIds string[] = []

@description('Required. The absolute URL of docs/operations.md, to which each alert links its section.')
param runbookUrl string

@description('Optional. p95 processing time per message above which the processing-time alert fires, in milliseconds.')
param processingP95Ms int = 5000

@description('Optional. Where the log alert rules live.')
param location string = resourceGroup().location

@description('Optional. Tags on every rule.')
param tags object = {}

var metricActions = [for id in actionGroupIds: { actionGroupId: id }]
var queries = loadJsonContent('queries.json')
var onQueue = [
  {
    name: 'EntityName'
    operator: 'Include'
    values: [
      entityName
    ]
  }
]

var metricRules = [
  {
    name: 'service-bus-server-errors'
    description: 'Service Bus answered ${entityName}\'s clients with server errors: the workers retry, but a run of them is an incident on the platform. Check Service Health and the namespace: ${runbookUrl}#service-bus-server-errors'
    severity: 2
    scope: namespaceResourceId
    namespace: 'Microsoft.ServiceBus/namespaces'
    metric: 'ServerErrors'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    window: 'PT5M'
    dimensions: onQueue
  }
  {
    name: 'queue-near-quota'
    description: '${entityName} holds more than 80% of its size quota: at 100% every send is refused (QuotaExceeded). Drain it or raise the quota: ${runbookUrl}#queue-near-quota'
    severity: 1
    scope: namespaceResourceId
    namespace: 'Microsoft.ServiceBus/namespaces'
    metric: 'Size'
    aggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: queueMaxSizeMegabytes * 1024 * 1024 * 8 / 10
    window: 'PT15M'
    dimensions: onQueue
  }
  {
    name: 'sql-cpu-high'
    description: 'Azure SQL\'s CPU stayed above 80% for 15 minutes: transactions slow down and messages wait before the database pauses anything. Look at the top queries, scale up: ${runbookUrl}#sql-cpu-high'
    severity: 2
    scope: sqlDatabaseResourceId
    namespace: 'Microsoft.Sql/servers/databases'
    metric: 'cpu_percent'
    aggregation: 'Average'
    operator: 'GreaterThan'
    threshold: 80
    window: 'PT15M'
    dimensions: []
  }
  {
    name: 'sql-connections-failed'
    description: 'Connections to Azure SQL failed on the service side (connection_failed counts system errors only, not user errors or firewall blocks): the workers retry and may pause receiving. Check the database\'s resource health: ${runbookUrl}#sql-connections-failed'
    severity: 2
    scope: sqlDatabaseResourceId
    namespace: 'Microsoft.Sql/servers/databases'
    metric: 'connection_failed'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    window: 'PT5M'
    dimensions: []
  }
  {
    name: 'sql-storage-high'
    description: 'Azure SQL\'s data space is more than 85% used: at 100% every insert fails and messages dead-letter as retries run out. Prune the inbox (retention), raise the max size: ${runbookUrl}#sql-storage-high'
    severity: 1
    scope: sqlDatabaseResourceId
    namespace: 'Microsoft.Sql/servers/databases'
    metric: 'storage_percent'
    aggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: 85
    window: 'PT15M'
    dimensions: []
  }
]

resource metricAlerts 'Microsoft.Insights/metricAlerts@2026-01-01' = [
  for rule in metricRules: {
    name: '${namePrefix}-${rule.name}'
    location: 'global'
    tags: tags
    properties: {
      description: rule.description
      severity: rule.severity
      enabled: true
      scopes: [
        rule.scope
      ]
      evaluationFrequency: 'PT5M'
      windowSize: rule.window
      criteria: {
        'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
        allOf: [
          {
            criterionType: 'StaticThresholdCriterion'
            name: rule.metric
            metricNamespace: rule.namespace
            metricName: rule.metric
            dimensions: rule.dimensions
            operator: rule.operator
            threshold: rule.threshold
            timeAggregation: rule.aggregation
          }
        ]
      }
      autoMitigate: true
      actions: metricActions
    }
  }
]

// The worker's process spans (requests) and its metrics (customMetrics), as scripts/monitoring.ts names them.
var processSpans = 'requests\n| where tostring(customDimensions["messaging.operation.name"]) == "process"'
var logRules = [
  {
    name: 'new-dead-letters'
    displayName: 'sbinbox: new dead letters'
    description: 'The worker dead-lettered messages in the last 5 minutes. Not auto-resolved: each window with new arrivals notifies again, however many wait already. Open sbinbox console on the newest reason: ${runbookUrl}#new-dead-letters'
    severity: 2
    query: queries.deadLettered
    measure: 'deadLettered'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    window: 'PT5M'
    autoMitigate: false
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
    name: 'processing-time-high'
    displayName: 'sbinbox: p95 processing time high'
    description: 'The p95 time to process a message stayed above ${processingP95Ms} ms for 15 minutes: a slow database or downstream, lock renewals at risk, the queue ageing. ${runbookUrl}#processing-time-high'
    severity: 3
    query: '${processSpans}\n| summarize p95 = percentile(duration, 95)'
    measure: 'p95'
    aggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: processingP95Ms
    window: 'PT15M'
    autoMitigate: true
    dimensions: []
  }
  {
    name: 'settlement-failures'
    displayName: 'sbinbox: settlements failing'
    description: 'Completions or abandons failed (MessageLockLost, a link lost): the broker redelivers those messages, and the inbox makes the second delivery a duplicate. A run of them means locks run out (processing too slow) or links drop: ${runbookUrl}#settlement-failures'
    severity: 2
    query: 'customMetrics\n| where name == "sbinbox.settlement.failures"\n| summarize failures = sum(value)'
    measure: 'failures'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    window: 'PT15M'
    autoMitigate: true
    dimensions: []
  }
  {
    name: 'no-telemetry'
    displayName: 'sbinbox: no telemetry from the workers'
    description: 'No metric from any worker for 15 minutes (the readiness gauge is exported every minute by every running worker): the workers are down, or their telemetry is broken, and every other log alert is blind. ${runbookUrl}#no-telemetry'
    severity: 1
    query: 'customMetrics\n| where name == "sbinbox.ready"\n| summarize points = count()'
    measure: 'points'
    aggregation: 'Total'
    operator: 'LessThan'
    threshold: 1
    window: 'PT15M'
    autoMitigate: true
    dimensions: []
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
        applicationInsightsResourceId
      ]
      evaluationFrequency: 'PT5M'
      windowSize: rule.window
      criteria: {
        allOf: [
          {
            query: rule.query
            timeAggregation: rule.aggregation
            metricMeasureColumn: rule.measure
            dimensions: rule.dimensions
            operator: rule.operator
            threshold: rule.threshold
            failingPeriods: {
              numberOfEvaluationPeriods: 1
              minFailingPeriodsToAlert: 1
            }
          }
        ]
      }
      autoMitigate: rule.autoMitigate
      actions: {
        actionGroups: actionGroupIds
      }
    }
  }
]
