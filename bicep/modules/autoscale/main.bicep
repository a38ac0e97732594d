metadata name = 'Autoscale on queue depth'
metadata description = 'Scales an App Service plan out and in on the ActiveMessages metric of one Service Bus queue.'

@description('Required. Name of the autoscale setting.')
param name string

@description('Optional. Location for all resources.')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Required. Resource ID of the App Service plan to scale.')
param planResourceId string

@description('Required. Resource ID of the Service Bus namespace that emits the metric.')
param namespaceResourceId string

@description('Required. Name of the queue whose ActiveMessages drive the scale (dimension EntityName): the worker\'s own queue, also with a topic, whose subscription forwards to it.')
param queueName string

@description('Optional. Fewest instances.')
@minValue(1)
param minimumCapacity int = 1

@description('Optional. Most instances.')
@minValue(1)
param maximumCapacity int = 3

@description('Optional. Instances when the metric is unavailable.')
@minValue(1)
param defaultCapacity int = 1

@description('Optional. Average ActiveMessages above which one instance is added.')
@minValue(1)
param scaleOutThreshold int = 100

@description('Optional. Average ActiveMessages below which one instance is removed.')
@minValue(0)
param scaleInThreshold int = 10

@description('Optional. Window the metric is averaged over (ISO 8601 duration).')
param timeWindow string = 'PT5M'

@description('Optional. Wait after a scale action before the next one (ISO 8601 duration).')
param cooldown string = 'PT5M'

var queueDimension = [
  {
    DimensionName: 'EntityName'
    Operator: 'Equals'
    Values: [
      queueName
    ]
  }
]

resource autoscale 'Microsoft.Insights/autoscalesettings@2022-10-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    enabled: true
    targetResourceUri: planResourceId
    profiles: [
      {
        name: 'queue-depth'
        capacity: {
          minimum: string(minimumCapacity)
          maximum: string(maximumCapacity)
          default: string(defaultCapacity)
        }
        rules: [
          {
            metricTrigger: {
              metricName: 'ActiveMessages'
              metricNamespace: 'Microsoft.ServiceBus/namespaces'
              metricResourceUri: namespaceResourceId
              dimensions: queueDimension
              timeGrain: 'PT1M'
              statistic: 'Average'
              timeWindow: timeWindow
              timeAggregation: 'Average'
              operator: 'GreaterThan'
              threshold: scaleOutThreshold
            }
            scaleAction: {
              direction: 'Increase'
              type: 'ChangeCount'
              value: '1'
              cooldown: cooldown
            }
          }
          {
            metricTrigger: {
              metricName: 'ActiveMessages'
              metricNamespace: 'Microsoft.ServiceBus/namespaces'
              metricResourceUri: namespaceResourceId
              dimensions: queueDimension
              timeGrain: 'PT1M'
              statistic: 'Average'
              timeWindow: timeWindow
              timeAggregation: 'Average'
              operator: 'LessThan'
              threshold: scaleInThreshold
            }
            scaleAction: {
              direction: 'Decrease'
              type: 'ChangeCount'
              value: '1'
              cooldown: cooldown
            }
          }
        ]
      }
    ]
  }
}

@description('The resource ID of the autoscale setting.')
output resourceId string = autoscale.id
