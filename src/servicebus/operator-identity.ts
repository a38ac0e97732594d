import type { TokenCredential } from "@azure/identity";

/** Who a console or `sbinbox dlq` acts as in Azure: the signed-in operator's Entra ID identity. */
export interface SignedInOperator {
  /** The sign-in name (upn, else preferred_username, else unique_name), or `app <appid>` for a service principal. */
  readonly name: string;
  /** The Entra ID object id: what a role assignment names (the Bicep's dlqReaders and dlqOperators). */
  readonly objectId?: string;
  readonly tenantId?: string;
  /** `name (object id)`: what the page shows and the audit records. */
  readonly label: string;
}

export const SERVICE_BUS_SCOPE = "https://servicebus.azure.net/.default";

/**
 * Asks the credential (DefaultAzureCredential: `az login`, `az login --use-device-code` on a jump box, a managed
 * identity) for a Service Bus token and reads who it names from its claims. The token is not verified here: it is
 * this process's own, just issued to it, and Service Bus verifies it on every request; the claims only name the
 * operator for the page and the audit. Authorisation is Service Bus's and Storage's own (roles), never these claims.
 */
export async function signedInOperator(credential: TokenCredential): Promise<SignedInOperator> {
  let token;
  try {
    token = await credential.getToken(SERVICE_BUS_SCOPE);
  } catch (error) {
    throw new Error(
      `no Entra ID sign-in for Service Bus: ${(error as Error).message.split("\n")[0]}; sign in first ` +
        `(az login, or az login --use-device-code on a jump box)`,
      { cause: error },
    );
  }
  if (!token)
    throw new Error("no Entra ID sign-in for Service Bus: the credential returned no token; run az login");
  return operatorFromToken(token.token);
}

/** The operator a JWT access token names (its payload's upn/preferred_username/unique_name/appid, oid, tid). */
export function operatorFromToken(jwt: string): SignedInOperator {
  const part = jwt.split(".")[1];
  let claims: Record<string, unknown>;
  try {
    claims = JSON.parse(Buffer.from(part ?? "", "base64url").toString("utf8")) as Record<string, unknown>;
  } catch {
    throw new Error("the Entra ID token is not a JWT: cannot tell who is signed in");
  }
  const text = (key: string) =>
    typeof claims[key] === "string" && claims[key] !== "" ? claims[key] : undefined;
  const objectId = text("oid");
  const app = text("appid") ?? text("azp");
  const name =
    text("upn") ??
    text("preferred_username") ??
    text("unique_name") ??
    (app ? `app ${app}` : undefined) ??
    objectId;
  if (name === undefined)
    throw new Error("the Entra ID token names no user or application (no upn, oid or appid)");
  return {
    name,
    ...(objectId === undefined ? {} : { objectId }),
    ...(text("tid") === undefined ? {} : { tenantId: text("tid") }),
    label: objectId === undefined || objectId === name ? name : `${name} (${objectId})`,
  };
}
