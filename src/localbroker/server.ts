import type { Server, Socket } from "node:net";
import { entityNotFound, parseEntityAddress, type EntityAddress } from "./addresses.ts";
import type { BrokerLogger } from "./logger.ts";
import { accepted, answerDrainsWithoutCredit, LinkConsumer, rejected } from "./consumer.ts";
import { forwards, RECEIVE_REFUSED } from "./forwarding.ts";
import { acceptSend, type Entity } from "./incoming.ts";
import { handleManagement, type ManagementResponse } from "./management.ts";
import { openSessionLink, SESSION_FILTER } from "./session-link.ts";
import { patchSession } from "./session-patches.ts";
import { managementKind, SERVER_BUSY, SERVER_BUSY_DESCRIPTION, type Throttle } from "./throttle.ts";
import { Topic } from "./topic.ts";
import { amqp, type Connection, type EventContext, type Link, type RheaMessage } from "./rhea.ts";

/** How long a shutdown lets clients answer the broker's close before their sockets are dropped. */
const CLOSE_GRACE_MS = 250;

export type { Entity };

export interface QueueLookup {
  find(address: EntityAddress): Entity | undefined;
}

type LinkRole =
  | { kind: "consumer"; consumer: LinkConsumer }
  | { kind: "producer"; queue: Entity }
  | { kind: "cbs" }
  | { kind: "management"; queue: Entity }
  | { kind: "reply" };

export interface AmqpServerOptions {
  queues: QueueLookup;
  logger: BrokerLogger;
  maxMessageSizeBytes: (entity: Entity) => number;
  /** Which operations are answered ServerBusy (throttle.ts). */
  throttle: Throttle;
}

/** The AMQP side: connections, CBS, links to queues and `$management`, on rhea's server support. */
export class AmqpServer {
  private readonly options: AmqpServerOptions;
  private readonly roles = new WeakMap<Link, LinkRole>();
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private readonly connections = new Set<Connection>();

  constructor(options: AmqpServerOptions) {
    this.options = options;
  }

  listen(port: number, host: string): Promise<number> {
    const container = amqp.create_container({
      id: "sbinbox-local-broker",
      treat_modified_as_released: false,
      autoaccept: false,
    });
    container.sasl_server_mechanisms.enable_anonymous();
    container.sasl_server_mechanisms.enable_plain(() => true);
    // The .NET SDK offers only MSSBCBS ("the token comes later, over CBS"); it is accepted like ANONYMOUS.
    (container.sasl_server_mechanisms as unknown as Record<string, () => unknown>)["MSSBCBS"] = () => ({
      outcome: undefined as boolean | undefined,
      username: undefined as string | undefined,
      start(this: { outcome?: boolean; username?: string }) {
        this.outcome = true;
        this.username = "cbs";
      },
    });
    // A failing handler never takes the broker down: it is logged, and the peer gets an AMQP error instead of
    // waiting forever (the link is closed, or the delivery rejected).
    const guard =
      (name: string, handler: (context: EventContext) => void) =>
      (context: EventContext): void => {
        try {
          handler(context);
        } catch (error) {
          const description = `local broker failed in ${name}: ${(error as Error).message}`;
          this.options.logger.warn(`${description}\n${(error as Error).stack ?? ""}`);
          try {
            const internal = { condition: "amqp:internal-error", description };
            if (context.delivery && !context.delivery.settled) {
              context.delivery.update(true, amqp.message.rejected({ error: internal }).described());
              context.delivery.remote_settled = true;
            } else if (name.endsWith("_open")) (context.sender ?? context.receiver)?.close(internal);
          } catch {
            // the connection is beyond answering; rhea closes it
          }
        }
      };
    container.on(
      "session_open",
      guard("session_open", (c) => patchSession(c.session)),
    );
    container.on(
      "sender_open",
      guard("sender_open", (c) => this.onSenderOpen(c.sender!)),
    );
    container.on(
      "receiver_open",
      guard("receiver_open", (c) => this.onReceiverOpen(c.receiver!)),
    );
    container.on(
      "message",
      guard("message", (c) => this.onMessage(c)),
    );
    for (const outcome of ["accepted", "rejected", "modified", "released"]) {
      container.on(
        outcome,
        guard(outcome, (c) => {
          const role = c.sender && this.roles.get(c.sender);
          if (role?.kind === "consumer" && c.delivery) role.consumer.settle(c.delivery, outcome);
        }),
      );
    }
    const pump = guard("flow", (c: EventContext) => {
      const role = c.sender && this.roles.get(c.sender);
      if (role?.kind === "consumer") role.consumer.queue.pump();
    });
    container.on("sendable", pump);
    container.on("sender_flow", pump);
    container.on(
      "sender_draining",
      guard("drain", (c) => {
        const role = c.sender && this.roles.get(c.sender);
        if (role?.kind === "consumer") role.consumer.drain();
        else c.sender?.set_drained(true);
      }),
    );
    const closeLink = guard("link_close", (c: EventContext) => {
      const link = c.sender ?? c.receiver;
      const role = link && this.roles.get(link);
      if (role?.kind === "consumer") role.consumer.close();
    });
    container.on("sender_close", closeLink);
    container.on("receiver_close", closeLink);
    container.on("sender_error", () => {});
    container.on("receiver_error", () => {});
    container.on("session_error", () => {});
    container.on("connection_error", () => {});
    container.on("connection_open", (c) => {
      this.connections.add(c.connection);
      this.options.logger.debug(`connection ${c.connection.options.id ?? ""} open`);
    });
    container.on("connection_close", (c) => this.connections.delete(c.connection));
    container.on("disconnected", (c) => this.connections.delete(c.connection));
    container.on("protocol_error", (c) =>
      this.options.logger.warn(`protocol error: ${describe(c.error ?? c)}`),
    );
    container.on("error", (c) => this.options.logger.warn(`error: ${describe(c)}`));

    const server = container.listen({ port, host });
    this.server = server;
    server.on("connection", (socket: Socket) => {
      this.sockets.add(socket);
      socket.on("close", () => this.sockets.delete(socket));
      socket.on("error", () => {});
    });
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.once("listening", () => {
        server.off("error", reject);
        const address = server.address();
        resolve(typeof address === "object" && address ? address.port : port);
      });
    });
  }

  /**
   * Shutdown: stops listening, tells every client the connection is closed (amqp:connection:forced, which the
   * SDKs answer by reconnecting elsewhere or retrying), gives them a moment to answer, then drops what is left
   * through rhea's own abort, so no heartbeat timer of a dropped connection keeps the process alive (a bare
   * socket.destroy() did, for up to half the client's idle timeout: 30 s with the Azure SDK).
   */
  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const connection of this.connections) {
      try {
        connection.close({
          condition: "amqp:connection:forced",
          description: "The local broker is shutting down.",
        });
      } catch {
        // already beyond closing; aborted below
      }
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all([...this.sockets].map((socket) => new Promise((resolve) => socket.once("close", resolve)))),
      new Promise((resolve) => (timer = setTimeout(resolve, CLOSE_GRACE_MS))),
    ]);
    clearTimeout(timer);
    for (const connection of this.connections) connection.abort_socket(connection.socket);
    this.connections.clear();
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }

  private refuse(link: Link, address: string | undefined): void {
    this.options.logger.debug(`refusing link to ${address ?? "(no address)"}`);
    link.close(entityNotFound(address ?? ""));
  }

  /** The client receives: from a queue, its dead-letter queue, or a reply link of CBS / $management. */
  private onSenderOpen(link: Link): void {
    const source = link.source?.address;
    link.set_source({ ...(link.source ?? {}), address: source });
    if (link.target) link.set_target({ ...link.target });
    link.local.attach["snd_settle_mode"] = link.snd_settle_mode ?? 0;
    link.local.attach["rcv_settle_mode"] = link.rcv_settle_mode ?? 0;
    if (source === "$cbs") {
      this.roles.set(link, { kind: "reply" });
      return;
    }
    const address = parseEntityAddress(source);
    const queue = address && this.options.queues.find(address);
    if (!address || !queue) return this.refuse(link, source);
    if (address.management) {
      this.roles.set(link, { kind: "reply" });
      return;
    }
    if (queue instanceof Topic) {
      link.close({
        condition: "amqp:not-allowed",
        description: `Cannot receive from topic '${queue.name}'; receive from one of its subscriptions, '${queue.name}/Subscriptions/<name>'.`,
      });
      return;
    }
    if (forwards(queue)) {
      this.options.logger.debug(`refusing a receiver on ${queue.name}: ${RECEIVE_REFUSED}`);
      link.close({ condition: "amqp:not-allowed", description: RECEIVE_REFUSED });
      return;
    }
    const filter = link.source?.["filter"];
    const sessionful = typeof filter === "object" && filter !== null && SESSION_FILTER in filter;
    if (queue.sessions && !sessionful) {
      link.close({
        condition: "amqp:not-allowed",
        description: `A non-sessionful message receiver cannot be created on an entity that requires sessions: accept a session of '${queue.name}'.`,
      });
      return;
    }
    answerDrainsWithoutCredit(link);
    const consumer = sessionful
      ? openSessionLink(link, queue)
      : new LinkConsumer(link, queue, link.snd_settle_mode === 1);
    if (!consumer) return;
    consumer.throttle = this.options.throttle;
    this.roles.set(link, { kind: "consumer", consumer });
    if (sessionful) return;
    queue.addConsumer(consumer);
  }

  /** The client sends: to a queue, or requests to CBS / $management. */
  private onReceiverOpen(link: Link): void {
    const target = link.target?.address;
    link.set_target({ ...(link.target ?? {}), address: target });
    if (link.source) link.set_source({ ...link.source });
    link.local.attach["snd_settle_mode"] = link.snd_settle_mode ?? 0;
    link.local.attach["rcv_settle_mode"] = 0;
    if (target === "$cbs") {
      this.roles.set(link, { kind: "cbs" });
      return;
    }
    const address = parseEntityAddress(target);
    const queue = address && this.options.queues.find(address);
    if (!address || !queue) return this.refuse(link, target);
    if (address.management) {
      this.roles.set(link, { kind: "management", queue });
      return;
    }
    if (address.deadLetter) {
      link.close({ condition: "amqp:not-allowed", description: "Cannot send to a dead-letter queue." });
      return;
    }
    if (address.subscription !== undefined) {
      link.close({
        condition: "amqp:not-allowed",
        description: `Cannot send to a subscription; send to its topic '${address.queue}'.`,
      });
      return;
    }
    link.local.attach["max_message_size"] = this.options.maxMessageSizeBytes(queue);
    this.roles.set(link, { kind: "producer", queue });
  }

  private onMessage(context: EventContext): void {
    const link = context.receiver;
    const delivery = context.delivery;
    if (!link || !delivery) return;
    const role = this.roles.get(link);
    const data = context.message;
    if (!Buffer.isBuffer(data)) {
      delivery.update(true, rejected("amqp:decode-error", "unexpected message encoding"));
      return;
    }
    if (role?.kind === "producer")
      return acceptSend(
        role.queue,
        data,
        context.format,
        delivery,
        this.options.maxMessageSizeBytes(role.queue),
        (messages) => this.options.throttle.admit("send", messages),
      );
    if (role?.kind === "cbs" || role?.kind === "management") {
      delivery.update(true, accepted());
      let request: RheaMessage;
      try {
        request = amqp.message.decode(data);
      } catch {
        return;
      }
      const operation = request.application_properties?.["operation"];
      const response =
        role.kind === "cbs"
          ? this.onCbs(operation, request)
          : this.onManagement(role.queue, operation, request.body);
      this.reply(link, request, response);
      return;
    }
    delivery.update(true, rejected("amqp:not-allowed", "this link does not accept messages"));
  }

  /** A `$management` request, answered ServerBusy (503, as Service Bus) when its kind is throttled. */
  private onManagement(entity: Entity, operation: unknown, body: unknown): ManagementResponse {
    const { kind, credits } = managementKind(operation);
    if (!this.options.throttle.admit(kind, credits))
      return { status: 503, condition: SERVER_BUSY, description: SERVER_BUSY_DESCRIPTION };
    return handleManagement(entity, operation, body);
  }

  /** put-token is accepted for any token (there is no security here), but only for entities that exist. */
  private onCbs(operation: unknown, request: RheaMessage): ManagementResponse {
    if (operation !== "put-token")
      return {
        status: 400,
        condition: "amqp:not-implemented",
        description: `unknown CBS operation ${String(operation)}`,
      };
    const audience = request.application_properties?.["name"];
    const address = typeof audience === "string" ? parseEntityAddress(audience) : undefined;
    if (address && !this.options.queues.find(address)) {
      const { description } = entityNotFound(String(audience));
      return { status: 404, condition: "amqp:not-found", description };
    }
    return { status: 202, description: "Accepted" };
  }

  private reply(requestLink: Link, request: RheaMessage, response: ManagementResponse): void {
    const replyTo = request.reply_to;
    const replyLink = this.findReplyLink(requestLink, replyTo);
    if (!replyLink) {
      this.options.logger.warn(`no reply link named ${String(replyTo)}`);
      return;
    }
    const properties: Record<string, unknown> = {
      statusCode: amqp.types.wrap_int(response.status),
      "status-code": amqp.types.wrap_int(response.status),
    };
    if (response.description !== undefined) {
      properties["statusDescription"] = response.description;
      properties["status-description"] = response.description;
    }
    if (response.condition !== undefined) {
      // A symbol, not a string: the .NET SDK casts it to AmqpSymbol.
      properties["errorCondition"] = amqp.types.wrap_symbol(response.condition);
      properties["error-condition"] = amqp.types.wrap_symbol(response.condition);
    }
    replyLink.send({
      correlation_id: request.message_id,
      to: replyTo,
      application_properties: properties,
      body: response.body ?? {},
    });
  }

  /**
   * The link a response goes out on: the one the request's reply-to names, or without a reply-to (uamqp-c's CBS and
   * management client, under the Python SDK up to 7.11, sends none) the reply link of the request link's own
   * address on the same session, as Service Bus answers it.
   */
  private findReplyLink(requestLink: Link, replyTo: string | undefined): Link | undefined {
    const connection = requestLink.connection as unknown as {
      find_sender(filter: (l: Link) => boolean): Link | undefined;
    };
    if (replyTo === undefined) {
      const address = requestLink.target?.address;
      return connection.find_sender(
        (l) =>
          this.roles.get(l)?.kind === "reply" &&
          l.session === requestLink.session &&
          l.source?.address === address,
      );
    }
    return connection.find_sender(
      (l) => this.roles.get(l)?.kind === "reply" && (l.name === replyTo || l.target?.address === replyTo),
    );
  }
}

function describe(value: unknown): string {
  if (value instanceof Error) return value.message;
  if (typeof value === "object" && value !== null && "message" in value) return String(value.message);
  return typeof value === "string" ? value : (JSON.stringify(value) ?? "unknown");
}
