import type { Server } from "node:net";
import rhea from "rhea";

/**
 * The few rhea internals the broker touches, typed narrowly. rhea's own typings omit fields the broker needs
 * (delivery.remote_state, link.local.attach), so these interfaces say exactly what is relied on.
 */
export interface RheaMessage {
  [key: string]: unknown;
  message_id?: unknown;
  correlation_id?: unknown;
  reply_to?: string;
  ttl?: number;
  delivery_count?: number;
  application_properties?: Record<string, unknown>;
  message_annotations?: Record<string, unknown>;
  body?: unknown;
}

export interface Outcome {
  [key: string]: unknown;
  error?: { condition?: string; description?: string; info?: Record<string, unknown> };
  undeliverable_here?: boolean;
  message_annotations?: Record<string, unknown>;
}

export interface Delivery {
  id: number;
  tag: Buffer;
  format?: number;
  settled: boolean;
  remote_settled: boolean;
  remote_state?: Outcome;
  link: Link;
  update(settled: boolean, state?: unknown): void;
}

export interface Terminus {
  address?: string;
  [key: string]: unknown;
}

export interface Link {
  name: string;
  credit: number;
  delivery_count: number;
  source?: Terminus;
  target?: Terminus;
  snd_settle_mode?: number;
  rcv_settle_mode?: number;
  properties?: Record<string, unknown>;
  local: { attach: Record<string, unknown> };
  session: { outgoing: { available(): number }; incoming?: unknown; on_transfer?: unknown };
  connection: Connection;
  is_sender(): boolean;
  set_source(fields: Terminus): void;
  set_target(fields: Terminus): void;
  send(payload: Buffer | RheaMessage, tag?: Buffer, format?: number): Delivery;
  close(error?: { condition: string; description: string }): void;
  set_drained(drained: boolean): void;
  is_open(): boolean;
  add_credit?(credit: number): void;
}

export interface Connection {
  options: { id?: string };
  close(error?: { condition: string; description: string }): void;
  is_open(): boolean;
  /** The connection's socket (rhea's own field). */
  socket?: unknown;
  /**
   * rhea's own way to drop a connection (its idle timeout uses it): ends and destroys the socket and clears the
   * connection's heartbeat timers, which a bare socket.destroy() leaves running (rhea listens for "end" only).
   */
  abort_socket(socket: unknown): void;
}

export interface EventContext {
  connection: Connection;
  session?: Record<string, unknown>;
  sender?: Link;
  receiver?: Link;
  delivery?: Delivery;
  message?: RheaMessage | Buffer;
  format?: number;
  error?: unknown;
}

export interface Reader {
  position: number;
  remaining(): number;
  read(): { descriptor?: { value: unknown }; value: unknown };
}

export interface Container {
  sasl_server_mechanisms: {
    enable_anonymous(): void;
    enable_plain(check: (user: string, pass: string) => boolean): void;
  };
  on(event: string, handler: (context: EventContext) => void): void;
  listen(options: Record<string, unknown>): Server;
}

interface RheaModule {
  create_container(options: Record<string, unknown>): Container;
  message: {
    encode(message: RheaMessage): Buffer;
    decode(buffer: Buffer): RheaMessage;
    accepted(): { described(): unknown };
    rejected(fields: Record<string, unknown>): { described(): unknown };
  };
  types: {
    Reader: new (buffer: Buffer) => Reader;
    wrap_array(values: unknown[], code: number, descriptor: undefined): unknown;
    wrap_uuid(value: Buffer): unknown;
    wrap_long(value: number | Buffer): unknown;
    wrap_int(value: number): unknown;
    wrap_uint(value: number): unknown;
    wrap_symbol(value: string): unknown;
    wrap_string(value: string): unknown;
    wrap_list(values: unknown[]): unknown;
    wrap_map(value: Record<string, unknown>): unknown;
    wrap_ulong(value: number): unknown;
    Null(): unknown;
    described(descriptor: unknown, value: unknown): unknown;
  };
}

export const amqp = rhea as unknown as RheaModule;
