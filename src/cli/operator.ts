import { userInfo } from "node:os";
import type { TokenCredential } from "@azure/identity";
import { lazyOperatorCredential } from "../servicebus/client.ts";
import { pinnedToOperator, signedInOperator } from "../servicebus/operator-identity.ts";

/**
 * Who is acting, for the audit of `sbinbox dlq` and `sbinbox console` against a local broker (a connection string):
 * the name given (`--operator`), else the OS user running the command. Against a namespace it is the Entra ID
 * sign-in instead (actingOperator).
 */
export function operatorIdentity(given?: string): string {
  if (given !== undefined) {
    const name = given.trim();
    if (name === "" || [...name].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f))
      throw new Error(`--operator ${JSON.stringify(given)} must be a name: not empty, no control characters`);
    return name;
  }
  return userInfo().username;
}

/** The OS user running the command, recorded beside the operator: --operator is only what the caller says. */
export function osUser(): string {
  return userInfo().username;
}

export interface ActingOperator {
  /** What the page shows and every audit line records. */
  readonly name: string;
  /** The operator's own developer sign-in (never a managed identity): Service Bus in Azure, and the blob archive. */
  readonly credential: TokenCredential;
}

/**
 * The one place `sbinbox dlq` and `sbinbox console` decide who acts. Against a namespace (`inAzure`) it is the
 * operator's Entra ID sign-in (signedInOperator), every later token pinned to it, and `--operator` is refused: a
 * name the caller types must not stand in the audit for the identity Service Bus authorised. Against a local broker
 * it is `--operator` or the OS user (operatorIdentity); the credential still serves a blob archive (--archive-url).
 */
export async function actingOperator(given: string | undefined, inAzure: boolean): Promise<ActingOperator> {
  const credential = lazyOperatorCredential();
  if (!inAzure) return { name: operatorIdentity(given), credential };
  if (given !== undefined)
    throw new Error(
      `--operator ${JSON.stringify(given)} refused with SBINBOX_SERVICEBUS_NAMESPACE: against a namespace you act, ` +
        `and the audit names you, as your own Entra ID sign-in (az login); --operator is for a local broker only`,
    );
  const signedIn = await signedInOperator(credential);
  // Every later token must name the same operator the page and the audit name.
  return { name: signedIn.label, credential: pinnedToOperator(credential, signedIn) };
}
