import type { ServiceBusClient, ServiceBusReceiver, ServiceBusReceiverOptions } from "@azure/service-bus";
import { parseEntity } from "../domain/entity.ts";
import { tallied } from "./busy.ts";

/** A receiver on an entity path: a queue, or a topic's subscription (the SDK takes the two names apart). */
export function createEntityReceiver(
  client: ServiceBusClient,
  path: string,
  options: ServiceBusReceiverOptions,
): ServiceBusReceiver {
  const entity = parseEntity(path);
  // Counted in the client's throttle tally when its calls go through whileBusy (the dead-letter tools).
  return tallied(
    client,
    entity.kind === "queue"
      ? client.createReceiver(entity.queue, options)
      : client.createReceiver(entity.topic, entity.subscription, options),
  );
}
