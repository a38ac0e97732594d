using './main.bicep'

// Values that identify people or tenants come from the environment, so this file stays shareable.
// An unset GitHub secret arrives as an empty variable, which readEnvironmentVariable returns as '' instead of its
// default: optional values therefore fall back explicitly when empty.
param environmentName = 'prod'
param location = empty(readEnvironmentVariable('AZURE_LOCATION', ''))
  ? 'westeurope'
  : readEnvironmentVariable('AZURE_LOCATION', '')
param sqlAdministratorLogin = readEnvironmentVariable('SQL_ADMIN_LOGIN')
param sqlAdministratorObjectId = readEnvironmentVariable('SQL_ADMIN_OBJECT_ID')
param sqlAdministratorPrincipalType = empty(readEnvironmentVariable('SQL_ADMIN_PRINCIPAL_TYPE', ''))
  ? 'Group'
  : readEnvironmentVariable('SQL_ADMIN_PRINCIPAL_TYPE', '')
// The plan's current instance count, read by the deployment before it runs (empty on the first deployment).
param appServicePlanCurrentCapacity = int(empty(readEnvironmentVariable('APP_SERVICE_PLAN_CAPACITY', ''))
  ? '0'
  : readEnvironmentVariable('APP_SERVICE_PLAN_CAPACITY', ''))
param sqlDatabaseSkuName = 'GP_S_Gen5_2'
// The inbox at 50 messages/s kept 15 days is about 26 GB with its indexes, plus the business tables: see the
// sizing in docs/deploy.md before changing the rate, the retention or this.
param sqlDatabaseMaxSizeGb = 64
param serviceBusSkuName = 'Premium'
param appServicePlanSkuName = 'P1v3'
param linuxFxVersion = 'NODE|22-lts'
param autoscaleMinimumCapacity = 2
param autoscaleMaximumCapacity = 10
param autoscaleScaleOutThreshold = 200
param maxConcurrentCalls = 8
param duplicateDetectionHistoryTimeWindow = 'PT1H'
param lockDurationSeconds = 120
// VNet integration and private endpoints: SQL and Service Bus without public access, Service Bus on Premium (the
// only tier with private endpoints); migrations then run from inside the network (docs/deploy.md).
param privateNetwork = true
