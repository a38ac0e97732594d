import type { Server, Socket } from "node:net";
import { entityNotFound, parseEntityAddress, type EntityAddress } from "./addresses.ts";
import {
  isBatchFormat,
  MalformedMessageError,
  messageIdKey,
  parseMessage,
  setMessageId,
  unpackBatch,
  type MessageParts,
} from "./codec.ts";
import type { BrokerLogger } from "./logger.ts";
import { accepted, answerDrainsWithoutCredit, LinkConsumer, rejected } from "./consumer.ts";
import { forwards, RECEIVE_REFUSED } from "./forwarding.ts";
import { newLockToken } from "./lock-token.ts";
import { handleManagement, type ManagementResponse } from "./management.ts";
import type { Queue } from "./queue.ts";
import { openSessionLink, SESSION_FILTER } from "./session-link.ts";
import { NO_SESSION_ID_SEND, sessionIdOfParts } from "./sessions.ts";
import { Topic } from "./topic.ts";
import {
  amqp,
  type Connection,
  type Delivery,
  type EventContext,
  type Link,
  type RheaMessage,
} from "./rhea.ts";

/** How long a shutdown lets clients answer the broker's close before their sockets are dropped. */
const CLOSE_GRACE_MS = 250;

/** Marks a single (non-batch) transfer so rhea hands the broker its bytes instead of a decoded message. */
const RAW_SINGLE = 0xfffffff0;

/** A queue, a subscription (a Queue of its own), a dead-letter subqueue, or a topic. */
export type Entity = Queue | Topic;

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
      guard("session_open", (c) => this.patchSession(c.session)),
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

  private patchSession(session: Record<string, unknown> | undefined): void {
    if (!session) return;
    attachRepliesFirst(session as unknown as RheaSession);
    answerEchoes(session as unknown as RheaSession);
    const original = session["on_transfer"] as (frame: { performative: { message_format?: number } }) => void;
    session["on_transfer"] = function (this: unknown, frame: { performative: { message_format?: number } }) {
      if (!frame.performative.message_format) frame.performative.message_format = RAW_SINGLE;
      original.call(this, frame);
    };
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
    if (role?.kind === "producer") return this.onSend(role.queue, data, context.format, delivery);
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
          : handleManagement(role.queue, operation, request.body);
      this.reply(link, request, response);
      return;
    }
    delivery.update(true, rejected("amqp:not-allowed", "this link does not accept messages"));
  }

  private onSend(queue: Entity, data: Buffer, format: number | undefined, delivery: Delivery): void {
    const limit = this.options.maxMessageSizeBytes(queue);
    if (data.length > limit) {
      delivery.update(
        true,
        rejected(
          "amqp:link:message-size-exceeded",
          `The received message (delivery-id:${delivery.id}, size:${data.length} bytes) exceeds the limit (${limit} bytes) currently allowed on the link.`,
        ),
      );
      return;
    }
    const full = queue.quotaExceeded(data.length);
    if (full !== undefined) {
      delivery.update(true, rejected("amqp:resource-limit-exceeded", full));
      return;
    }
    let messages: MessageParts[];
    try {
      const raws = isBatchFormat(format) ? unpackBatch(data) : [data];
      messages = raws.map(parseMessage);
    } catch (error) {
      if (!(error instanceof MalformedMessageError)) throw error;
      delivery.update(true, rejected("amqp:decode-error", error.message));
      return;
    }
    if ("sessions" in queue && queue.sessions && messages.some((m) => sessionIdOfParts(m) === undefined)) {
      delivery.update(true, rejected("amqp:not-allowed", NO_SESSION_ID_SEND));
      return;
    }
    for (const parts of messages) {
      let key = messageIdKey(parts.head.message_id);
      if (key === undefined) {
        key = newLockToken().replace(/-/g, "");
        setMessageId(parts, key);
      }
      queue.send(parts, key);
    }
    delivery.update(true, accepted());
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

  private findReplyLink(requestLink: Link, replyTo: string | undefined): Link | undefined {
    if (replyTo === undefined) return undefined;
    const links = (
      requestLink.connection as unknown as { find_sender(filter: (l: Link) => boolean): Link | undefined }
    ).find_sender(
      (l) => this.roles.get(l)?.kind === "reply" && (l.name === replyTo || l.target?.address === replyTo),
    );
    return links;
  }
}

interface RheaSession {
  state: { need_open(): boolean };
  local: { begin: unknown };
  links: Record<string, { state: { need_open(): boolean }; local: { attach: unknown } }>;
  remote: { handles: Record<number, { issue_flow: boolean } | undefined> };
  connection: { _register(): void };
  output(frame: unknown): void;
  _process(): void;
  _write_flow(link?: unknown): void;
  on_flow(frame: { performative: { echo?: boolean; handle?: number } }): void;
}

/**
 * rhea's session writes queued transfers and dispositions, then each link's pending attach, flow and detach. A
 * client that sends its credit (or a request on a reply link) right behind its attach, as the .NET SDK does with
 * prefetch, would get a transfer on a handle it has not seen attached, and end the session with
 * amqp:session:unattached-handle. Service Bus answers an attach before anything else on that link, so pending
 * attaches go out first here. Flow echoes, drain replies and detaches stay after the transfers, as rhea has them:
 * a drain reply must count transfers already on the wire, and nothing may follow a detach.
 */
function attachRepliesFirst(session: RheaSession): void {
  const original = session._process.bind(session);
  session._process = () => {
    if (session.state.need_open()) session.output(session.local.begin);
    for (const name in session.links) {
      const link = session.links[name]!;
      if (link.state.need_open()) session.output(link.local.attach);
    }
    original();
  };
}

/**
 * A flow with `echo` asks the peer for its own flow state (AMQP 1.0, 2.7.4); rhea ignores the field. The answer
 * for a link goes through the link's own flow, written after its attach and any transfers already queued.
 */
function answerEchoes(session: RheaSession): void {
  const original = session.on_flow.bind(session);
  session.on_flow = (frame) => {
    original(frame);
    if (frame.performative.echo !== true) return;
    const handle = frame.performative.handle;
    const link = handle === undefined || handle === null ? undefined : session.remote.handles[handle];
    if (link) {
      link.issue_flow = true;
      session.connection._register();
    } else session._write_flow();
  };
}

function describe(value: unknown): string {
  if (value instanceof Error) return value.message;
  if (typeof value === "object" && value !== null && "message" in value) return String(value.message);
  return typeof value === "string" ? value : (JSON.stringify(value) ?? "unknown");
}
