import { createRequire } from "node:module";
import { connect, createServer, type Server, type Socket } from "node:net";

const require = createRequire(import.meta.url);
/** rhea's own frame codec, so the tap reads the wire exactly as a client would (and tests can write frames). */
export const frames = require("rhea/lib/frames.js") as {
  read_frame(buffer: Buffer): { channel: number; performative?: Performative };
  flow(fields: Record<string, unknown>): unknown;
};

interface Performative {
  handle?: number;
  name?: string;
  remote_channel?: number;
  delivery_id?: number;
  role?: boolean;
  first?: number;
  last?: number;
  described(): unknown;
}

const NAMES: Record<number, string> = {
  0x10: "open",
  0x11: "begin",
  0x12: "attach",
  0x13: "flow",
  0x14: "transfer",
  0x15: "disposition",
  0x16: "detach",
  0x17: "end",
  0x18: "close",
};

/** One frame, in wire order. SASL frames and heartbeats are left out. */
export interface TappedFrame {
  name: string;
  channel: number;
  handle: number | undefined;
  /** Order across both directions, for checks that relate the client's frames to the broker's. */
  seq?: number;
  /** attach: the link's name, the same on both sides (handles and channels are each side's own). */
  linkName?: string;
  /** begin: the channel of the peer's begin this one answers. */
  remoteChannel?: number;
  /** transfer: its delivery id (the first frame of a delivery only). */
  deliveryId?: number;
  /** disposition: true when written as receiver (settling the peer's transfers), and its delivery id range. */
  role?: boolean;
  first?: number;
  last?: number;
}

/** A TCP proxy in front of the broker that records every AMQP frame the broker sends to the client. */
export interface FrameTap {
  readonly port: number;
  /** What the broker wrote. */
  readonly frames: TappedFrame[];
  /** What the client wrote (to tie the broker's dispositions to the client's transfers and links). */
  readonly clientFrames: TappedFrame[];
  close(): Promise<void>;
}

/** Reads AMQP frames from a byte stream in chunks, as they arrive. */
function frameReader(into: TappedFrame[], next: () => number): (chunk: Buffer) => void {
  let pending = Buffer.alloc(0);
  return (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    for (;;) {
      if (pending.length >= 8 && pending.subarray(0, 4).toString("latin1") === "AMQP") {
        pending = pending.subarray(8);
        continue;
      }
      if (pending.length < 4) break;
      const size = pending.readUInt32BE(0);
      if (pending.length < size) break;
      const raw = pending.subarray(0, size);
      pending = pending.subarray(size);
      if (raw[5] !== 0) continue; // SASL
      const frame = frames.read_frame(raw);
      const p = frame.performative;
      if (!p) continue;
      const code = Number((p.described() as { descriptor: { value: unknown } }).descriptor.value);
      const name = NAMES[code] ?? `0x${code.toString(16)}`;
      const tapped: TappedFrame = { name, channel: frame.channel, handle: p.handle, seq: next() };
      if (name === "attach") tapped.linkName = p.name;
      if (name === "begin" && p.remote_channel !== undefined && p.remote_channel !== null)
        tapped.remoteChannel = p.remote_channel;
      if (name === "transfer" && p.delivery_id !== undefined && p.delivery_id !== null)
        tapped.deliveryId = p.delivery_id;
      if (name === "disposition") {
        tapped.role = p.role;
        tapped.first = p.first;
        tapped.last = p.last ?? p.first;
      }
      into.push(tapped);
    }
  };
}

export async function startFrameTap(brokerPort: number): Promise<FrameTap> {
  const tapped: TappedFrame[] = [];
  const fromClient: TappedFrame[] = [];
  let seq = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect({ host: "127.0.0.1", port: brokerPort });
    sockets.add(client).add(upstream);
    client.pipe(upstream);
    const readClient = frameReader(fromClient, () => seq++);
    const readBroker = frameReader(tapped, () => seq++);
    client.on("data", readClient);
    upstream.on("data", (chunk: Buffer) => {
      client.write(chunk);
      readBroker(chunk);
    });
    const end = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on("close", end).on("error", end);
    upstream.on("close", end).on("error", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (typeof address !== "object" || !address) throw new Error("frame tap has no port");
  return {
    port: address.port,
    frames: tapped,
    clientFrames: fromClient,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * Session-level order: on each channel the broker's begin comes before any other frame of that session, and
 * nothing follows its end (until a new begin opens the channel again). Connection frames (open, close) and
 * heartbeats are on no session and left out.
 */
export function framesOutsideSession(tapped: TappedFrame[]): TappedFrame[] {
  const open = new Set<number>();
  const early: TappedFrame[] = [];
  for (const frame of tapped) {
    if (frame.name === "open" || frame.name === "close") continue;
    if (frame.name === "begin") open.add(frame.channel);
    else if (!open.has(frame.channel)) early.push(frame);
    else if (frame.name === "end") open.delete(frame.channel);
  }
  return early;
}

/**
 * The frames the broker wrote on a link before its attach for that link, if any. Handles are per session and may
 * be reused after a detach, so each attach starts a new life of the handle.
 *
 * Dispositions carry delivery ids rather than a handle. With the client's frames given, each broker disposition is
 * tied to its link: as receiver (role true) it settles transfers the client sent, whose delivery ids name the
 * client's handle and so, by the link's name, the broker's; as sender it settles the broker's own transfers. A
 * disposition for a link the broker has not attached on that session yet is reported, as is one for a delivery
 * nobody sent. (Settling a delivery after its link detached is allowed, so only "attached before" is asked.)
 */
export function framesBeforeAttach(tapped: TappedFrame[], clientFrames: TappedFrame[] = []): TappedFrame[] {
  const attached = new Set<string>();
  const early: TappedFrame[] = [];
  const everAttachedNames = new Set<string>(); // broker channel / link name
  const brokerLinkName = new Map<string, string>(); // broker channel/handle -> link name
  const clientChannelOf = new Map<number, number>(); // broker channel -> client channel
  const clientLinkName = new Map<string, string>(); // client channel/handle -> link name
  const clientDelivery = new Map<string, string>(); // client channel/delivery id -> link name
  const brokerDelivery = new Map<string, string>(); // broker channel/delivery id -> link name
  const events = [
    ...tapped.map((frame, i) => ({ frame, fromBroker: true, order: frame.seq ?? i })),
    ...clientFrames.map((frame, i) => ({ frame, fromBroker: false, order: frame.seq ?? i })),
  ].sort((a, b) => a.order - b.order);
  for (const { frame, fromBroker } of events) {
    const key = `${frame.channel}/${frame.handle}`;
    if (!fromBroker) {
      if (frame.name === "attach" && frame.linkName !== undefined) clientLinkName.set(key, frame.linkName);
      if (frame.name === "transfer" && frame.deliveryId !== undefined) {
        const name = clientLinkName.get(key);
        if (name !== undefined) clientDelivery.set(`${frame.channel}/${frame.deliveryId}`, name);
      }
      continue;
    }
    if (frame.name === "begin" && frame.remoteChannel !== undefined)
      clientChannelOf.set(frame.channel, frame.remoteChannel);
    if (frame.name === "disposition") {
      const first = frame.first ?? 0;
      const last = Math.min(frame.last ?? first, first + 10_000);
      for (let id = first; id <= last; id++) {
        const name =
          frame.role === true
            ? clientDelivery.get(`${clientChannelOf.get(frame.channel)}/${id}`)
            : brokerDelivery.get(`${frame.channel}/${id}`);
        if (name === undefined || !everAttachedNames.has(`${frame.channel}/${name}`)) {
          early.push(frame);
          break;
        }
      }
      continue;
    }
    if (frame.handle === undefined) continue;
    if (frame.name === "attach") {
      attached.add(key);
      if (frame.linkName !== undefined) {
        brokerLinkName.set(key, frame.linkName);
        everAttachedNames.add(`${frame.channel}/${frame.linkName}`);
      }
    } else if (frame.name === "detach") {
      if (!attached.has(key)) early.push(frame);
      attached.delete(key);
    } else {
      if (!attached.has(key)) early.push(frame);
      const name = brokerLinkName.get(key);
      if (frame.name === "transfer" && frame.deliveryId !== undefined && name !== undefined)
        brokerDelivery.set(`${frame.channel}/${frame.deliveryId}`, name);
    }
  }
  return early;
}
