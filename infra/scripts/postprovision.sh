#!/usr/bin/env bash
# Post-provision: what Bicep cannot do inside the database.
#   1. the worker's managed identity becomes a database user with db_datareader and db_datawriter only;
#   2. `sbinbox migrate` creates or updates the inbox schema.
# Both run as the person or pipeline signed in to the Azure CLI, who must be the SQL server's Entra admin (or a
# member of the admin group). The Entra token comes from that login through DefaultAzureCredential; nothing is
# stored and no password exists (the server accepts Entra ID only).
#
# Reads the deployment's outputs from the environment (azd exports them; deploy.yml exports them too):
#   AZURE_RESOURCE_GROUP SQL_SERVER_NAME SQL_SERVER_FQDN SQL_DATABASE_NAME WORKER_APP_NAME
# Optional:
#   WORKER_APP_CLIENT_ID  the identity's client ID: creates the user by SID, so the server needs no Directory Readers
#   SBINBOX_CLIENT_IP     this machine's public IPv4; when set, a firewall rule for it is opened during the run and
#                         removed at the end (the server otherwise admits only the worker's outbound addresses)
set -euo pipefail
cd "$(dirname "$0")/../.."

for name in AZURE_RESOURCE_GROUP SQL_SERVER_NAME SQL_SERVER_FQDN SQL_DATABASE_NAME WORKER_APP_NAME; do
  if [ -z "${!name:-}" ]; then
    echo "postprovision: $name is not set (run after the Bicep deployment, with its outputs in the environment)" >&2
    exit 2
  fi
done

az account show --query user.name --output tsv >/dev/null || {
  echo "postprovision: sign in first (az login), as the SQL server's Entra admin" >&2
  exit 2
}

if [ -n "${SBINBOX_CLIENT_IP:-}" ]; then
  rule="postprovision-$(date +%s)"
  az sql server firewall-rule create --resource-group "$AZURE_RESOURCE_GROUP" --server "$SQL_SERVER_NAME" \
    --name "$rule" --start-ip-address "$SBINBOX_CLIENT_IP" --end-ip-address "$SBINBOX_CLIENT_IP" --output none
  trap 'az sql server firewall-rule delete --resource-group "$AZURE_RESOURCE_GROUP" --server "$SQL_SERVER_NAME" --name "$rule" --output none' EXIT
fi

if [ ! -d node_modules ]; then
  npm ci --omit=dev --no-audit --no-fund
fi

node scripts/grant-app-database-user.ts

# The schema is changed by the admin here, never by the worker: its user has no DDL rights.
# "Active Directory Integrated" makes the driver use DefaultAzureCredential, i.e. the Azure CLI login above.
SBINBOX_SQLSERVER_CONNECTION_STRING="Server=${SQL_SERVER_FQDN};Database=${SQL_DATABASE_NAME};Authentication=Active Directory Integrated;Encrypt=true" \
  node bin/sbinbox.js migrate
