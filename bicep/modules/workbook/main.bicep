metadata name = 'Operations workbook'
metadata description = 'The sbinbox workbook: outcomes, duplicates, retries, dead-letters by reason, outage pauses, batches, processing time, queue depth and the relay, linked from the Application Insights component.'

@description('Required. Name of the Application Insights component (in this resource group): the workbook queries it and is listed under its Workbooks.')
param applicationInsightsName string

@description('Required. Resource ID of the Service Bus namespace whose ActiveMessages and DeadletteredMessages the workbook charts.')
param namespaceResourceId string

@description('Optional. Location for the workbook.')
param location string = resourceGroup().location

@description('Optional. Tags of the workbook.')
param tags object = {}

@description('Optional. Display name of the workbook.')
param displayName string = 'sbinbox operations'

// Generated from src/telemetry/names.ts by scripts/monitoring.ts; test/infra/monitoring.test.ts keeps it current.
var content = replace(loadTextContent('workbook.json'), '__SERVICE_BUS_NAMESPACE_ID__', namespaceResourceId)

resource component 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  // A workbook's name must be a GUID; this one is stable per component, so a redeployment updates it in place.
  name: guid(resourceGroup().id, applicationInsightsName, 'sbinbox-operations-workbook')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: displayName
    category: 'workbook'
    sourceId: component.id
    serializedData: content
  }
}

@description('The resource ID of the workbook.')
output resourceId string = workbook.id
