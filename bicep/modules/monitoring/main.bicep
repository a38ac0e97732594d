metadata name = 'Monitoring'
metadata description = 'A Log Analytics workspace and a workspace-based Application Insights component that accepts only Entra ID tokens.'

@description('Required. Name of the Log Analytics workspace.')
param logAnalyticsWorkspaceName string

@description('Required. Name of the Application Insights component.')
param applicationInsightsName string

@description('Optional. Location for all resources.')
param location string = resourceGroup().location

@description('Optional. Tags of the resources.')
param tags object = {}

@description('Optional. Days the workspace keeps data.')
@minValue(30)
@maxValue(730)
param retentionInDays int = 30

resource workspace 'Microsoft.OperationalInsights/workspaces@2026-03-01' = {
  name: logAnalyticsWorkspaceName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
    features: {
      enableLogAccessUsingOnlyResourcePermissions: true
      // Entra ID only: no workspace shared key lets an agent write to or read from it (diagnostic settings and
      // workspace-based Application Insights do not use the keys).
      disableLocalAuth: true
    }
  }
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: applicationInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    // Entra ID only: the instrumentation key in the connection string then identifies the component but is no
    // credential. Senders need Monitoring Metrics Publisher on it (the identity module grants the worker's).
    DisableLocalAuth: true
    IngestionMode: 'LogAnalytics'
  }
}

@description('The resource ID of the Log Analytics workspace.')
output logAnalyticsWorkspaceResourceId string = workspace.id

@description('The name of the Application Insights component; its connection string is read from the resource, never passed as an output.')
output applicationInsightsName string = applicationInsights.name

@description('The resource ID of the Application Insights component.')
output applicationInsightsResourceId string = applicationInsights.id
