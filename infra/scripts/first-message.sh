#!/usr/bin/env bash
# The first message of an environment, sent from where its namespace is reachable (on the private network: a runner
# inside the VNet) and seen applied. Run signed in to the Azure CLI as a principal that has Azure Service Bus Data
# Sender on the queue (prod: the app identity, which infra/main.prod.bicepparam lists in `publishers`) and Reader on
# the resource group (to read the queue's counts):
#   1. publishes one NoteCreated (the example handlers' type) with `sbinbox publish` from the worker package;
#   2. waits until the queue holds no active or scheduled message, which the worker reaches only by completing the
#      message, and it completes only after the inbox transaction committed (or found the message already applied);
#      a dead-lettered message, or a retry scheduled instead, is not "applied". The counts come from the management
#      plane and may lag the broker, so a first 0 (perhaps the count from before the publish) is not trusted: it
#      takes two readings of 0, the first after at least one pause, the second FIRST_MESSAGE_SETTLE_SECONDS later;
#   3. fails, naming the reason, when the dead-letter count rose or the wait ran out.
# A queue-drain check: it does not read the note's row (docs/deploy.md, "The first message in prod"). Meant for a
# quiet queue (a new environment): other traffic would keep the counts above zero.
#
# Reads, by name in any letter case: AZURE_RESOURCE_GROUP SERVICEBUS_NAMESPACE SERVICEBUS_QUEUE
# Optional:
#   SBINBOX_PACKAGE_DIR               the worker package to publish from (default: this checkout)
#   FIRST_MESSAGE_NOTE_ID             the note's id and key (default: GITHUB_RUN_ID, else the time): a rerun with
#                                     the same id republishes the same MessageId, which duplicate detection drops
#   FIRST_MESSAGE_WAIT_SECONDS        how long to wait for it to be applied (default 600: the worker may still be
#                                     starting, and a new role can take minutes to apply)
#   FIRST_MESSAGE_POLL_SECONDS        the pause between looks at the counts (default 10)
#   FIRST_MESSAGE_SETTLE_SECONDS      the pause before the confirming second reading of 0 (default 30)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"

output() {
  local line
  line="$(env | grep -i -m1 "^$1=" || true)"
  printf '%s' "${line#*=}"
}

for name in AZURE_RESOURCE_GROUP SERVICEBUS_NAMESPACE SERVICEBUS_QUEUE; do
  value="$(output "$name")"
  if [ -z "$value" ]; then
    echo "first-message: $name is not set (run after the Bicep deployment, with its outputs in the environment)" >&2
    exit 2
  fi
  printf -v "$name" '%s' "$value"
done
note_id="${FIRST_MESSAGE_NOTE_ID:-${GITHUB_RUN_ID:-$(date +%s)}}"
wait_seconds="${FIRST_MESSAGE_WAIT_SECONDS:-600}"
poll_seconds="${FIRST_MESSAGE_POLL_SECONDS:-10}"
settle_seconds="${FIRST_MESSAGE_SETTLE_SECONDS:-30}"
for setting in FIRST_MESSAGE_NOTE_ID:"$note_id" FIRST_MESSAGE_WAIT_SECONDS:"$wait_seconds" \
  FIRST_MESSAGE_POLL_SECONDS:"$poll_seconds" FIRST_MESSAGE_SETTLE_SECONDS:"$settle_seconds"; do
  if ! [[ "${setting#*:}" =~ ^[0-9]{1,12}$ ]]; then
    echo "first-message: ${setting%%:*} must be a whole number (got '${setting#*:}')" >&2
    exit 2
  fi
done
namespace="${SERVICEBUS_NAMESPACE%%.*}"

# active, scheduled and dead-lettered counts of the queue, tab-separated; stops the script when they cannot be read.
counts() {
  local line
  line="$(az servicebus queue show --resource-group "$AZURE_RESOURCE_GROUP" --namespace-name "$namespace" \
    --name "$SERVICEBUS_QUEUE" --output tsv \
    --query "[countDetails.activeMessageCount, countDetails.scheduledMessageCount, countDetails.deadLetterMessageCount]")" ||
    line=""
  if ! [[ "$line" =~ ^[0-9]+$'\t'[0-9]+$'\t'[0-9]+$ ]]; then
    echo "first-message: could not read the counts of queue $SERVICEBUS_QUEUE (az servicebus queue show; the signed-in principal needs Reader on $AZURE_RESOURCE_GROUP)" >&2
    exit 1
  fi
  printf '%s\n' "$line"
}

line="$(counts)"
read -r _ _ dead_before <<< "$line"
package_dir="${SBINBOX_PACKAGE_DIR:-$root}"
# The CLI's login, never a managed identity of the machine the job runs on (DefaultAzureCredential tries one first).
(cd "$package_dir" && AZURE_TOKEN_CREDENTIALS=AzureCliCredential SERVICEBUS_NAMESPACE="$SERVICEBUS_NAMESPACE" \
  SERVICEBUS_QUEUE="$SERVICEBUS_QUEUE" node bin/sbinbox.js publish --type NoteCreated --key "first-message-$note_id" \
  --body "{\"noteId\": $note_id, \"text\": \"first message\"}")

deadline=$((SECONDS + 10#$wait_seconds))
# Readings of 0 in a row; the first look comes only after a pause.
drained=0
sleep "$poll_seconds"
while true; do
  line="$(counts)"
  read -r active scheduled dead <<< "$line"
  if [ "$dead" -gt "$dead_before" ]; then
    echo "first-message: the queue's dead-letter count rose from $dead_before to $dead: the message was not applied; its reason: sbinbox dlq list (docs/operations.md)" >&2
    exit 1
  fi
  if [ "$active" -eq 0 ] && [ "$scheduled" -eq 0 ]; then
    drained=$((drained + 1))
    if [ "$drained" -ge 2 ]; then
      echo "first-message: note $note_id applied (the worker completed it; no message left on $SERVICEBUS_QUEUE, read twice ${settle_seconds}s apart)"
      exit 0
    fi
    sleep "$settle_seconds"
    continue
  fi
  drained=0
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "first-message: not applied after ${wait_seconds}s ($active active, $scheduled scheduled on $SERVICEBUS_QUEUE): is the worker ready? (docs/deploy.md, If /readyz stays 503)" >&2
    exit 1
  fi
  sleep "$poll_seconds"
done
