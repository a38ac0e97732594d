using './main.bicep'

// Values that identify people or tenants come from the environment, so this file stays shareable.
// An unset GitHub secret arrives as an empty variable, which readEnvironmentVariable returns as '' instead of its
// default: optional values therefore fall back explicitly when empty.
param environmentName = 'dev'
// No location: every resource goes to the resource group's region, which the bootstrap chose once
// (scripts/environment-identities.ts --location, default northeurope: a region GitHub-hosted private networking
// supports; docs/deploy.md, "Before the first prod deployment").
param sqlAdministratorLogin = readEnvironmentVariable('SQL_ADMIN_LOGIN')
param sqlAdministratorObjectId = readEnvironmentVariable('SQL_ADMIN_OBJECT_ID')
param sqlAdministratorPrincipalType = empty(readEnvironmentVariable('SQL_ADMIN_PRINCIPAL_TYPE', ''))
  ? 'Group'
  : readEnvironmentVariable('SQL_ADMIN_PRINCIPAL_TYPE', '')
// The plan's current instance count, read by the deployment before it runs (empty on the first deployment).
param appServicePlanCurrentCapacity = int(empty(readEnvironmentVariable('APP_SERVICE_PLAN_CAPACITY', ''))
  ? '0'
  : readEnvironmentVariable('APP_SERVICE_PLAN_CAPACITY', ''))
param sqlDatabaseSkuName = 'Basic'
// Basic allows 2 GB at most: enough for the dev retention at a few messages a second (docs/deploy.md).
param sqlDatabaseMaxSizeGb = 2
param serviceBusSkuName = 'Standard'
param appServicePlanSkuName = 'S1'
param autoscaleMinimumCapacity = 1
param autoscaleMaximumCapacity = 2
param maxConcurrentCalls = 4
