using './main.bicep'

// Values that identify people or tenants come from the environment, so this file stays shareable.
param environmentName = 'prod'
param location = readEnvironmentVariable('AZURE_LOCATION', 'westeurope')
param sqlAdministratorLogin = readEnvironmentVariable('SQL_ADMIN_LOGIN')
param sqlAdministratorObjectId = readEnvironmentVariable('SQL_ADMIN_OBJECT_ID')
param sqlAdministratorPrincipalType = readEnvironmentVariable('SQL_ADMIN_PRINCIPAL_TYPE', 'Group')
param sqlDatabaseSkuName = 'GP_S_Gen5_2'
param serviceBusSkuName = 'Standard'
param appServicePlanSkuName = 'P1v3'
param linuxFxVersion = 'NODE|22-lts'
param autoscaleMinimumCapacity = 2
param autoscaleMaximumCapacity = 10
param autoscaleScaleOutThreshold = 200
param maxConcurrentCalls = 8
param duplicateDetectionHistoryTimeWindow = 'PT1H'
param lockDurationSeconds = 120
