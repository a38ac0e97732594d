import type { AccessToken, GetTokenOptions, TokenCredential } from "@azure/identity";
import { ServiceBusClient, type ServiceBusClientOptions } from "@azure/service-bus";

export type ServiceBusTarget =
  | { readonly connectionString: string }
  | { readonly fullyQualifiedNamespace: string; readonly credential?: TokenCredential };

/**
 * A client from a connection string (local broker, official emulator, SAS) or from a namespace with
 * DefaultAzureCredential (managed identity on App Service). Its retry policy is the SDK's default unless `options`
 * say otherwise: the callers that retry ServerBusy themselves pass OWN_RETRY (src/servicebus/throttling.ts).
 */
export function createServiceBusClient(
  target: ServiceBusTarget,
  options: ServiceBusClientOptions = {},
): ServiceBusClient {
  if ("connectionString" in target) return new ServiceBusClient(target.connectionString, options);
  return new ServiceBusClient(
    target.fullyQualifiedNamespace,
    target.credential ?? lazyDefaultAzureCredential(),
    options,
  );
}

/**
 * DefaultAzureCredential, with @azure/identity (MSAL included, tens of MB resident) loaded on the first token
 * request: a process on a connection string never loads it.
 */
export function lazyDefaultAzureCredential(): TokenCredential {
  let credential: Promise<TokenCredential> | undefined;
  return {
    async getToken(scopes: string | string[], options?: GetTokenOptions): Promise<AccessToken | null> {
      credential ??= import("@azure/identity").then(
        ({ DefaultAzureCredential }) => new DefaultAzureCredential(),
      );
      return (await credential).getToken(scopes, options);
    },
  };
}

/**
 * The operator's own developer sign-in, for the console and `sbinbox dlq`: the Azure CLI (`az login`, `az login
 * --use-device-code` on a jump box), then the Azure Developer CLI, then Azure PowerShell. Never
 * DefaultAzureCredential: its chain tries Environment, Workload Identity and Managed Identity before the Azure CLI, so
 * on the jump VM (whose system-assigned identity Entra ID login needs) every Linux user would act, unnamed, as the
 * VM. AZURE_TOKEN_CREDENTIALS, which narrows DefaultAzureCredential only, does not change this chain. Loaded on the
 * first token request, like lazyDefaultAzureCredential.
 */
export function lazyOperatorCredential(): TokenCredential {
  let credential: Promise<TokenCredential> | undefined;
  return {
    async getToken(scopes: string | string[], options?: GetTokenOptions): Promise<AccessToken | null> {
      credential ??= import("@azure/identity").then(
        ({
          AzureCliCredential,
          AzureDeveloperCliCredential,
          AzurePowerShellCredential,
          ChainedTokenCredential,
        }) =>
          new ChainedTokenCredential(
            new AzureCliCredential(),
            new AzureDeveloperCliCredential(),
            new AzurePowerShellCredential(),
          ),
      );
      return (await credential).getToken(scopes, options);
    },
  };
}

export type { ServiceBusClient } from "@azure/service-bus";
