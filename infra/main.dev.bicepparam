using './main.bicep'

// Values that identify people or tenants come from the environment, so this file stays shareable.
param environmentName = 'dev'
param location = readEnvironmentVariable('AZURE_LOCATION', 'westeurope')
param sqlAdministratorLogin = readEnvironmentVariable('SQL_ADMIN_LOGIN')
param sqlAdministratorObjectId = readEnvironmentVariable('SQL_ADMIN_OBJECT_ID')
param sqlAdministratorPrincipalType = readEnvironmentVariable('SQL_ADMIN_PRINCIPAL_TYPE', 'Group')
param sqlDatabaseSkuName = 'Basic'
param serviceBusSkuName = 'Standard'
param appServicePlanSkuName = 'S1'
param autoscaleMinimumCapacity = 1
param autoscaleMaximumCapacity = 2
param maxConcurrentCalls = 4
