import { isServiceBusError } from "@azure/service-bus";

/** What the console or `sbinbox dlq` was doing when Service Bus refused it. */
export type Attempt = "list" | "replay" | "edit" | "purge" | "restore";

const NEEDS: Record<Attempt, string> = {
  list: "Azure Service Bus Data Receiver on the queue (the Bicep's dlqReaders or dlqOperators)",
  purge:
    "Azure Service Bus Data Receiver on the queue and Storage Blob Data Contributor on the archive (dlqOperators)",
  replay: "Azure Service Bus Data Sender and Data Receiver on the queue (the Bicep's dlqOperators)",
  edit: "Azure Service Bus Data Sender and Data Receiver on the queue (the Bicep's dlqOperators)",
  restore: "Azure Service Bus Data Sender on the queue (the Bicep's dlqOperators)",
};

/**
 * A Service Bus refusal of the signed-in identity as a sentence naming the role the attempt needs, or undefined for
 * any other error. The console decides from the refusal, not from the token's claims: an Azure role assignment is not
 * in the token (Service Bus evaluates it on each request), so the refusal is the one authoritative answer, and it is
 * right the moment a role is granted, removed or activated through PIM. Nothing is lost on a refusal: a replay's copy
 * is sent before its original is completed, and a purge archives before it deletes.
 */
export function refusalMessage(error: unknown, attempt: Attempt, who?: string): string | undefined {
  if (!isServiceBusError(error) || error.code !== "UnauthorizedAccess") return undefined;
  return (
    `Service Bus refused ${who ?? "the signed-in identity"} (UnauthorizedAccess): a ${attempt} needs ` +
    `${NEEDS[attempt]}; nothing was changed by the refused step. ${error.message.split("\n")[0]}`
  );
}
