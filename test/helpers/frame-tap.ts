import { createRequire } from "node:module";
import { connect, createServer, type Server, type Socket } from "node:net";

const require = createRequire(import.meta.url);
/** rhea's own frame codec, so the tap reads the wire exactly as a client would (and tests can write frames). */
export const frames = require("rhea/lib/frames.js") as {
  read_frame(buffer: Buffer): { channel: number; performative?: { handle?: number; described(): unknown } };
  flow(fields: Record<string, unknown>): unknown;
};

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

/** One frame the broker wrote, in wire order. SASL frames and heartbeats are left out. */
export interface TappedFrame {
  name: string;
  channel: number;
  handle: number | undefined;
}

/** A TCP proxy in front of the broker that records every AMQP frame the broker sends to the client. */
export interface FrameTap {
  readonly port: number;
  readonly frames: TappedFrame[];
  close(): Promise<void>;
}

export async function startFrameTap(brokerPort: number): Promise<FrameTap> {
  const tapped: TappedFrame[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect({ host: "127.0.0.1", port: brokerPort });
    sockets.add(client).add(upstream);
    client.pipe(upstream);
    let pending = Buffer.alloc(0);
    upstream.on("data", (chunk: Buffer) => {
      client.write(chunk);
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
        if (!frame.performative) continue;
        const code = Number(
          (frame.performative.described() as { descriptor: { value: unknown } }).descriptor.value,
        );
        tapped.push({
          name: NAMES[code] ?? `0x${code.toString(16)}`,
          channel: frame.channel,
          handle: frame.performative.handle,
        });
      }
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
 * The first frame on (channel, handle) that the broker wrote before its attach for that handle, if any. Handles
 * are per session and may be reused after a detach, so each attach starts a new life of the handle.
 *
 * Dispositions carry delivery ids, not a handle, and are not checked here; they cannot precede their link's
 * attach by construction: a disposition the broker writes settles either its own transfer (checked here to follow
 * the attach) or a transfer the client sent, which needed credit from a broker flow on that link (also checked
 * here to follow the attach). The broker's attachRepliesFirst writes pending attaches ahead of transfers and
 * dispositions alike.
 */
export function framesBeforeAttach(tapped: TappedFrame[]): TappedFrame[] {
  const attached = new Set<string>();
  const early: TappedFrame[] = [];
  for (const frame of tapped) {
    if (frame.handle === undefined) continue;
    const key = `${frame.channel}/${frame.handle}`;
    if (frame.name === "attach") attached.add(key);
    else if (frame.name === "detach") {
      if (!attached.has(key)) early.push(frame);
      attached.delete(key);
    } else if (frame.name !== "disposition" && !attached.has(key)) early.push(frame);
  }
  return early;
}
