using './main.bicep'

// Values that identify people or tenants come from the environment, so this file stays shareable.
// An unset GitHub secret arrives as an empty variable, which readEnvironmentVariable returns as '' instead of its
// default: optional values therefore fall back explicitly when empty.
param environmentName = 'prod'
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
param sqlDatabaseSkuName = 'GP_S_Gen5_2'
// The inbox at 50 messages/s kept 15 days is about 26 GB with its indexes, plus the business tables. Its unique
// index (about 11 GB) outgrows GP_S_Gen5_2's 6 GB of memory: about 23 reads and 50 writes (one per insert's leaf)
// a second at that rate, 73 of the SKU's 640 IOPS (91 after an idle spell shrinks the serverless cache to about
// 2 GB). See "Database size and memory" in docs/deploy.md before changing the rate, the retention, the SKU or this.
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
// Alerts reach someone: without an e-mail or an action group, or with a runbook URL that is not https://, the
// deployment fails with AlertRoutingMissing / AlertRunbookUrlNotAbsolute (docs/deploy.md).
param requireAlertRouting = true
param alertEmail = readEnvironmentVariable('ALERT_EMAIL', '')
param alertActionGroupId = readEnvironmentVariable('ALERT_ACTION_GROUP_ID', '')
param alertRunbookUrl = readEnvironmentVariable('ALERT_RUNBOOK_URL', '')
// A year of logs (the SQL and Service Bus audit included); a bank's own retention rule may ask for more.
param logRetentionInDays = 365
param zoneRedundant = true
// Never pause: the first login after a pause fails while the database resumes.
param sqlAutoPauseDelayMinutes = -1
param defenderForSql = true
// The app identity (the one that runs migrate) may send the first message from inside the VNet (docs/deploy.md,
// "The first message in prod"); it already deploys the code that runs as the worker, which sends to the queue.
param publishers = empty(readEnvironmentVariable('APP_PRINCIPAL_ID', ''))
  ? []
  : [{ principalId: readEnvironmentVariable('APP_PRINCIPAL_ID', ''), principalType: 'ServicePrincipal' }]
// The DLQ console's operators, Entra ID groups (comma-separated object ids): readers list dead letters and read their
// bodies, operators also replay, purge and restore (docs/operations.md, "Signed-in operators in Azure"). Unset: none.
param dlqReaders = empty(readEnvironmentVariable('DLQ_READER_GROUP_IDS', ''))
  ? []
  : map(split(readEnvironmentVariable('DLQ_READER_GROUP_IDS', ''), ','), id => { principalId: trim(id), principalType: 'Group' })
param dlqOperators = empty(readEnvironmentVariable('DLQ_OPERATOR_GROUP_IDS', ''))
  ? []
  : map(split(readEnvironmentVariable('DLQ_OPERATOR_GROUP_IDS', ''), ','), id => { principalId: trim(id), principalType: 'Group' })
// Bastion and the jump VM the operators reach the private namespace from, when OPERATOR_ACCESS is true (docs/operations.md,
// "Reaching prod's private namespace"); its break-glass SSH key (a public key, not a secret) is then required.
param operatorAccess = readEnvironmentVariable('OPERATOR_ACCESS', '') == 'true'
param operatorVmAdminPublicKey = readEnvironmentVariable('OPERATOR_VM_SSH_PUBLIC_KEY', '')
