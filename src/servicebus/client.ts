import { DefaultAzureCredential, type TokenCredential } from "@azure/identity";
import { ServiceBusClient, type ServiceBusClientOptions } from "@azure/service-bus";

export type ServiceBusTarget =
  | { readonly connectionString: string }
  | { readonly fullyQualifiedNamespace: string; readonly credential?: TokenCredential };

/**
 * A client from a connection string (local broker, official emulator, SAS) or from a namespace with
 * DefaultAzureCredential (managed identity on App Service).
 */
export function createServiceBusClient(
  target: ServiceBusTarget,
  options: ServiceBusClientOptions = {},
): ServiceBusClient {
  if ("connectionString" in target) return new ServiceBusClient(target.connectionString, options);
  return new ServiceBusClient(
    target.fullyQualifiedNamespace,
    target.credential ?? new DefaultAzureCredential(),
    options,
  );
}

export type { ServiceBusClient } from "@azure/service-bus";
