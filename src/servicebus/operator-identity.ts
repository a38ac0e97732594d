import type { TokenCredential } from "@azure/identity";

/** Who a console or `sbinbox dlq` acts as in Azure: the signed-in operator's Entra ID identity. */
export interface SignedInOperator {
  /** The sign-in name (upn, else preferred_username, else unique_name). */
  readonly name: string;
  /** The Entra ID object id: what a role assignment names (the Bicep's dlqReaders and dlqOperators). */
  readonly objectId?: string;
  readonly tenantId?: string;
  /** `name (object id)`: what the page shows and the audit records. */
  readonly label: string;
}

export const SERVICE_BUS_SCOPE = "https://servicebus.azure.net/.default";

/**
 * Asks the credential (lazyOperatorCredential: `az login`, `az login --use-device-code` on a jump box; never a managed
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

/**
 * The operator a JWT access token names (upn, else preferred_username, else unique_name; oid, tid), or an error when
 * it names an application: `idtyp: "app"`, or no user name at all (a managed identity or service principal token
 * carries appid/azp and no upn; Microsoft's access token claims reference). An operator acts as themself, so a token
 * of the jump VM's identity, or of any application, is refused rather than named. The claims are for display and
 * the audit only: access tokens are meant for the resource, not the client, so nothing is authorised from them.
 */
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
  const name = text("upn") ?? text("preferred_username") ?? text("unique_name");
  if (text("idtyp") === "app" || name === undefined)
    throw new Error(
      `signed in as an application (${app ? `app ${app}` : (objectId ?? "no user claims")}: a managed identity or ` +
        `service principal?), not a person: sign in as yourself (az login, or az login --use-device-code on a jump ` +
        `box); the console and sbinbox dlq act with the operator's own identity only`,
    );
  return {
    name,
    ...(objectId === undefined ? {} : { objectId }),
    ...(text("tid") === undefined ? {} : { tenantId: text("tid") }),
    label: objectId === undefined ? name : `${name} (${objectId})`,
  };
}

/**
 * The credential, refusing any later token that names someone else than `operator` (an `az login` as another account
 * mid-session): the page and the audit name the operator read at start, so every token after it is compared by
 * object id (by name when there is none) and a switch fails the step with a clear error instead of acting, unnamed,
 * as the other account. Restart the console to act as the new sign-in.
 */
export function pinnedToOperator(credential: TokenCredential, operator: SignedInOperator): TokenCredential {
  return {
    async getToken(scopes, options) {
      const token = await credential.getToken(scopes, options);
      if (!token) return token;
      const now = operatorFromToken(token.token);
      const same = operator.objectId ? now.objectId === operator.objectId : now.name === operator.name;
      if (!same)
        throw new Error(
          `the Entra ID sign-in changed from ${operator.label} to ${now.label} since start: refused (the audit ` +
            `names ${operator.label}); restart to act as ${now.name}`,
        );
      return token;
    },
  };
}
