import { randomUUID } from "node:crypto";
import rhea, { type EventContext } from "rhea";

export interface RawResponse {
  readonly status: number;
  readonly description: string | undefined;
  readonly condition: string | undefined;
  readonly body: Record<string, unknown> | undefined;
}

/**
 * One request on an entity's `$management` node over plain AMQP (rhea), for operations no SDK in node_modules
 * sends (batch delete): a request link, a reply link, the request with `operation` and a body, the reply.
 */
export async function managementRequest(
  port: number,
  entity: string,
  operation: string,
  body: Record<string, unknown>,
): Promise<RawResponse> {
  const container = rhea.create_container({ id: `raw-${randomUUID()}` });
  const connection = container.connect({ host: "127.0.0.1", port, reconnect: false });
  const address = `${entity}/$management`;
  const replyTo = `reply-${randomUUID()}`;
  try {
    return await new Promise<RawResponse>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to ${operation} on ${address}`)), 10_000);
      connection.on("connection_error", (c: EventContext) =>
        reject(new Error(JSON.stringify(c.connection.error))),
      );
      const sender = connection.open_sender({ target: { address } });
      const receiver = connection.open_receiver({ source: { address }, target: { address: replyTo } });
      receiver.on("message", (context: EventContext) => {
        clearTimeout(timer);
        const message = context.message!;
        const props = (message.application_properties ?? {}) as Record<string, unknown>;
        resolve({
          status: Number(props["statusCode"] ?? props["status-code"]),
          description: props["statusDescription"] as string | undefined,
          condition: props["errorCondition"] as string | undefined,
          body: message.body as Record<string, unknown> | undefined,
        });
      });
      receiver.once("receiver_open", () => {
        const send = (): void => {
          sender.send({
            message_id: randomUUID(),
            reply_to: replyTo,
            application_properties: { operation },
            body,
          });
        };
        if (sender.sendable()) send();
        else sender.once("sendable", send);
      });
    });
  } finally {
    connection.close();
  }
}
