#!/usr/bin/env bash
# Post-provision: what Bicep cannot do inside the database. One command, `sbinbox migrate --app-user ...`, run as
# the person or pipeline signed in to the Azure CLI, who must be the SQL server's Entra admin (or in its group):
#   1. applies the inbox's migrations, then the handler module's (SBINBOX_HANDLERS: the team's tables);
#   2. makes the worker's user-assigned identity a database user with db_datareader and db_datawriter only,
#      created from its client ID (no Microsoft Graph lookup, so the server's identity needs no directory role).
# The Entra token comes from the Azure CLI login (DefaultAzureCredential narrowed to AzureCliCredential); nothing is
# stored and no password exists (the server accepts Entra ID only).
#
# Reads the deployment's outputs from the environment, by name in any letter case (ARM does not always keep the
# case of an output's name; azd and the deploy workflow export them as they come):
#   AZURE_RESOURCE_GROUP SQL_SERVER_NAME SQL_SERVER_FQDN SQL_DATABASE_NAME WORKER_IDENTITY_NAME
#   WORKER_IDENTITY_CLIENT_ID
# Optional:
#   SBINBOX_CLIENT_IP          this machine's public IPv4: a firewall rule for it is opened for the run and removed
#                              at the end (the server otherwise admits only the worker's outbound addresses). Unset,
#                              a firewall refusal fails at once: no rule was made, so there is nothing to wait for
#   PRIVATE_NETWORK            the deployment's output: true when SQL is reached through its private endpoint only;
#                              then no firewall rule is made (run from inside the virtual network)
#   SBINBOX_STALE_RULE_SECONDS age past which a leftover postprovision-<epoch> rule (a killed run's) is deleted
#                              before this run starts (default 7200)
#
# `postprovision.sh --cleanup` only deletes rules: this machine's (SBINBOX_CLIENT_IP) and the stale ones. The deploy
# workflow runs it in an `if: always()` step, so a cancelled or failed job leaves no rule behind.
#   SBINBOX_PACKAGE_DIR        the worker package to run `sbinbox migrate` from (default: this checkout)
#   SBINBOX_HANDLERS           the handler module (default: the package's dist-handlers/index.js, else the
#                              checkout's handlers/index.ts: the same module the worker runs)
#   SBINBOX_SQL_WAIT_SECONDS   how long to keep retrying while the firewall still refuses (default 600: Azure says
#                              a new rule "may take up to five minutes" to apply)
#   SBINBOX_SQL_RETRY_SECONDS  the pause between attempts (default 20)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"

# The variable NAME in any letter case; empty when absent.
output() {
  local line
  line="$(env | grep -i -m1 "^$1=" || true)"
  printf '%s' "${line#*=}"
}

cleanup_only=false
if [ "${1:-}" = "--cleanup" ]; then cleanup_only=true; fi
# --after-deploy: the second half of a migration that cannot run beside the previous version's workers (sbinbox
# migrate's exit 76, e.g. 0002_inbox_markers). The predeploy run found it pending and left the marker file; after the
# new code is deployed (the old workers replaced; the new ones wait for the migration without receiving), this run
# applies it with --workers-stopped. Without the marker it does nothing.
after_deploy=false
migrate_flags=()
deferred="${SBINBOX_DEFERRED_MIGRATION_FILE:-$root/.azure-package/migrate-after-deploy}"
if [ "${1:-}" = "--after-deploy" ]; then
  after_deploy=true
  if [ ! -f "$deferred" ]; then exit 0; fi
  migrate_flags=(--workers-stopped)
fi

required="AZURE_RESOURCE_GROUP SQL_SERVER_NAME SQL_SERVER_FQDN SQL_DATABASE_NAME WORKER_IDENTITY_NAME WORKER_IDENTITY_CLIENT_ID"
if [ "$cleanup_only" = true ]; then required="AZURE_RESOURCE_GROUP SQL_SERVER_NAME"; fi
for name in $required; do
  value="$(output "$name")"
  if [ -z "$value" ] && [ "$cleanup_only" = true ]; then
    echo "postprovision --cleanup: $name is not set (the deployment did not get that far): no rule to delete" >&2
    exit 0
  fi
  if [ -z "$value" ]; then
    echo "postprovision: $name is not set (run after the Bicep deployment, with its outputs in the environment)" >&2
    exit 2
  fi
  printf -v "$name" '%s' "$value"
done

# Whole numbers of seconds only: bash arithmetic would take "10m" or "abc" for a variable or a bad base and stop with
# an unrelated error, and sleep would take "-1" for an option.
wait_seconds="${SBINBOX_SQL_WAIT_SECONDS:-600}"
retry_seconds="${SBINBOX_SQL_RETRY_SECONDS:-20}"
stale_seconds="${SBINBOX_STALE_RULE_SECONDS:-7200}"
for setting in SBINBOX_SQL_WAIT_SECONDS:"$wait_seconds" SBINBOX_SQL_RETRY_SECONDS:"$retry_seconds" \
  SBINBOX_STALE_RULE_SECONDS:"$stale_seconds"; do
  if ! [[ "${setting#*:}" =~ ^[0-9]{1,6}$ ]]; then
    echo "postprovision: ${setting%%:*} must be a whole number of seconds (got '${setting#*:}')" >&2
    exit 2
  fi
done
# Base 10 explicitly: a leading zero ("08") is otherwise read as octal.
wait_seconds=$((10#$wait_seconds))
retry_seconds=$((10#$retry_seconds))
stale_seconds=$((10#$stale_seconds))
private_network="$(output PRIVATE_NETWORK | tr '[:upper:]' '[:lower:]')"

az account show --query user.name --output tsv >/dev/null || {
  echo "postprovision: sign in first (az login), as the SQL server's Entra admin" >&2
  exit 2
}

# Deletes the postprovision-<epoch> rules of this machine's address, and those older than the stale age (a run that
# was killed before its exit trap). Rule names carry their creation time, so no other rule is ever touched.
sweep_rules() {
  local now name address created
  now="$(date +%s)"
  az sql server firewall-rule list --resource-group "$AZURE_RESOURCE_GROUP" --server "$SQL_SERVER_NAME" \
    --query "[?starts_with(name, 'postprovision-')].[name, startIpAddress]" --output tsv |
    while read -r name address; do
      created="${name#postprovision-}"
      created="${created%%-*}"
      [[ "$created" =~ ^[0-9]+$ ]] || continue
      if { [ -n "${SBINBOX_CLIENT_IP:-}" ] && [ "$address" = "$SBINBOX_CLIENT_IP" ] && [ "$1" = mine ]; } ||
        [ $((now - 10#$created)) -ge "$stale_seconds" ]; then
        echo "postprovision: deleting firewall rule $name ($address)" >&2
        az sql server firewall-rule delete --resource-group "$AZURE_RESOURCE_GROUP" --server "$SQL_SERVER_NAME" \
          --name "$name" --output none
      fi
    done
}

if [ "$cleanup_only" = true ]; then
  if [ "$private_network" = true ]; then exit 0; fi
  sweep_rules mine
  exit 0
fi

package_dir="${SBINBOX_PACKAGE_DIR:-$root}"
if [ -z "${SBINBOX_HANDLERS:-}" ]; then
  if [ -f "$package_dir/dist-handlers/index.js" ]; then SBINBOX_HANDLERS=./dist-handlers/index.js; else SBINBOX_HANDLERS=./handlers/index.ts; fi
fi
if [ ! -d "$package_dir/node_modules" ]; then
  (cd "$package_dir" && npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund)
fi

rule=""
if [ "$private_network" = true ]; then
  # Public network access is off: a firewall rule would admit nothing. The connection goes to the private endpoint.
  echo "postprovision: private network: no firewall rule; this machine must reach the SQL server's private endpoint" >&2
elif [ -n "${SBINBOX_CLIENT_IP:-}" ]; then
  sweep_rules stale
  rule="postprovision-$(date +%s)"
  az sql server firewall-rule create --resource-group "$AZURE_RESOURCE_GROUP" --server "$SQL_SERVER_NAME" \
    --name "$rule" --start-ip-address "$SBINBOX_CLIENT_IP" --end-ip-address "$SBINBOX_CLIENT_IP" --output none
  trap 'az sql server firewall-rule delete --resource-group "$AZURE_RESOURCE_GROUP" --server "$SQL_SERVER_NAME" --name "$rule" --output none' EXIT
fi

# "Active Directory Integrated" makes the driver use DefaultAzureCredential, and AZURE_TOKEN_CREDENTIALS narrows it to
# the Azure CLI login above: unnarrowed, it tries a managed identity first, so on a runner VM with one (a
# self-hosted runner in the VNet) it would sign in as the VM, not as the SQL admin the CLI is signed in as.
export AZURE_TOKEN_CREDENTIALS=AzureCliCredential
connection="Server=${SQL_SERVER_FQDN};Database=${SQL_DATABASE_NAME};Authentication=Active Directory Integrated;Encrypt=true"
deadline=$((SECONDS + wait_seconds))
attempt=1
while true; do
  status=0
  (cd "$package_dir" && SBINBOX_HANDLERS="$SBINBOX_HANDLERS" SBINBOX_SQLSERVER_CONNECTION_STRING="$connection" \
    node bin/sbinbox.js migrate "${migrate_flags[@]}" --app-user "$WORKER_IDENTITY_NAME" \
      --app-client-id "$WORKER_IDENTITY_CLIENT_ID") ||
    status=$?
  if [ "$status" -eq 0 ]; then
    [ "$after_deploy" = true ] && rm -f "$deferred"
    break
  fi
  # 76: a pending migration cannot run beside the previous version's workers; nothing was applied. Deploy first, then
  # the postdeploy hook (--after-deploy) applies it. Messages in between wait in the queue (docs/inbox.md).
  if [ "$status" -eq 76 ] && [ "$after_deploy" = false ]; then
    mkdir -p "$(dirname "$deferred")"
    : >"$deferred"
    echo "postprovision: a pending migration needs the old workers replaced first: deploying the code, then migrating (postdeploy hook: postprovision.sh --after-deploy)" >&2
    break
  fi
  # 77: the server's public network access is off (Azure SQL error 47073 or 42101): no rule or wait lets this in.
  if [ "$status" -eq 77 ]; then
    echo "postprovision: the SQL server's public network access is off: run this from inside the virtual network (docs/deploy.md, Network)" >&2
    exit 77
  fi
  # 75: the firewall refused this machine (Azure SQL error 40615). Anything else is not going to pass by waiting.
  if [ "$status" -ne 75 ]; then
    echo "postprovision: sbinbox migrate failed (exit $status)" >&2
    exit "$status"
  fi
  # Waiting only helps while a rule this run made is being applied.
  if [ -z "$rule" ]; then
    if [ "$private_network" = true ]; then
      echo "postprovision: the SQL server refused this machine, and its public access is off: run this from inside the virtual network (docs/deploy.md)" >&2
    else
      echo "postprovision: the SQL firewall refused this machine and no rule was made for it: set SBINBOX_CLIENT_IP to this machine's public IPv4" >&2
    fi
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "postprovision: the SQL firewall still refuses this machine after ${wait_seconds}s ($attempt attempts)" >&2
    exit 1
  fi
  echo "postprovision: attempt $attempt refused by the SQL firewall (the rule is not applied yet); retrying in ${retry_seconds}s" >&2
  sleep "$retry_seconds"
  attempt=$((attempt + 1))
done
echo "postprovision: done after $attempt attempt(s)"
