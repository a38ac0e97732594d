// The bench's database proxy, in a process of its own (its CPU is not the worker's): every PostgreSQL connection
// of the end-to-end bench goes through it, so that (1) a delay can be added each way, as a database a network hop
// away (0.5 ms each way is a database in the same Azure region), and (2) the client's round trips and commits are
// counted where the client sees them, whatever the code that sends them.
//
// A round trip is a turn: a client write that carries a query message (Query, Parse, Bind, Execute, Sync, ...)
// after the server has answered since the client's last counted write; connection start-up and authentication are
// not counted. A commit is a Query or Parse whose text starts with COMMIT.
//
// Node's timers tick in whole milliseconds, too coarse for 0.5 ms; a spinning loop would burn a core of the
// two. So a worker thread sleeps in Atomics.wait (sub-millisecond, no CPU while waiting) until the earliest
// held chunk is due and then wakes this thread, which forwards every chunk that is due.
import { fork, type ChildProcess } from "node:child_process";
import { createConnection, createServer, type Socket } from "node:net";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";

export interface ProxyCounts {
  readonly turns: number;
  readonly commits: number;
  /** Chunks held, and their total time held (ms): the delay as delivered. */
  readonly held: number;
  readonly heldMs: number;
}

/** Nanoseconds on the monotonic clock both threads read, in milliseconds. */
const nowMs = (): number => Number(process.hrtime.bigint()) / 1e6;

const TIMER_THREAD = `
const { workerData, parentPort } = require("node:worker_threads");
const gen = new Int32Array(workerData, 0, 1);
const due = new Float64Array(workerData, 8, 1);
for (;;) {
  const g = Atomics.load(gen, 0);
  const at = due[0];
  if (at === 0) { Atomics.wait(gen, 0, g); continue; }
  const wait = at - Number(process.hrtime.bigint()) / 1e6;
  if (wait > 0.02 && Atomics.wait(gen, 0, g, wait) !== "timed-out") continue;
  parentPort.postMessage(0);
  Atomics.wait(gen, 0, g); // until the main thread has forwarded and set the next due time
}`;

interface Held {
  readonly at: number;
  readonly to: Socket;
  readonly chunk: Buffer;
  readonly after?: () => void;
}

/** Child mode: the proxy itself, to `target` (host:port), answering the parent's requests over IPC. */
async function serveProxy(targetPort: number): Promise<void> {
  let delayMs = 0;
  let turns = 0;
  let commits = 0;
  const shared = new SharedArrayBuffer(16);
  const gen = new Int32Array(shared, 0, 1);
  const due = new Float64Array(shared, 8, 1);
  const held: Held[] = [];
  let head = 0;
  const timer = new Worker(TIMER_THREAD, { eval: true, workerData: shared });
  timer.unref();
  const arm = (at: number) => {
    due[0] = at;
    Atomics.add(gen, 0, 1);
    Atomics.notify(gen, 0);
  };
  // The wake-up comes late by about the same each time (the thread's wake, the message to this thread): it is
  // learnt, and the timer set that much early, so that the delay as delivered is the one asked for.
  let lateMs = 0;
  let heldCount = 0;
  let heldMs = 0;
  timer.on("message", () => {
    const now = nowMs();
    if (head < held.length) lateMs = 0.9 * lateMs + 0.1 * (now - (held[head]!.at - lateMs));
    const until = now + 0.02;
    while (head < held.length && held[head]!.at <= until) {
      const h = held[head++]!;
      if (!h.to.destroyed) h.to.write(h.chunk);
      heldCount += 1;
      heldMs += now - (h.at - delayMs);
      h.after?.();
    }
    if (head === held.length) {
      held.length = 0;
      head = 0;
    }
    arm(head < held.length ? held[head]!.at - lateMs : 0);
  });
  // Chunks of one direction keep their order: the delay is the same for all, so the queue stays sorted.
  const send = (to: Socket, chunk: Buffer, after?: () => void) => {
    if (delayMs === 0) {
      to.write(chunk);
      after?.();
      return;
    }
    const wasEmpty = head === held.length;
    held.push({ at: nowMs() + delayMs, to, chunk, after });
    if (wasEmpty) arm(held[head]!.at - lateMs);
  };

  const server = createServer((client) => {
    client.setNoDelay(true);
    const upstream = createConnection({ host: "127.0.0.1", port: targetPort });
    upstream.setNoDelay(true);
    let started = false;
    let answered = true;
    let rest: Buffer | undefined;
    const scan = (chunk: Buffer): boolean => {
      let buf = rest ? Buffer.concat([rest, chunk]) : chunk;
      rest = undefined;
      let query = false;
      for (;;) {
        if (!started) {
          if (buf.length < 8) break;
          const len = buf.readInt32BE(0);
          if (buf.length < len) break;
          // An SSLRequest (80877103) comes before the startup message, and is answered with one byte.
          if (buf.readInt32BE(4) !== 80877103) started = true;
          buf = buf.subarray(len);
          continue;
        }
        if (buf.length < 5) break;
        const type = buf[0]!;
        const len = buf.readInt32BE(1);
        if (buf.length < 1 + len) break;
        // p: password/SASL, X: terminate; everything else a client sends after start-up is a query message.
        if (type !== 0x70 && type !== 0x58) query = true;
        if (type === 0x51 /* Q */ || type === 0x50 /* P */) {
          let text = 5;
          if (type === 0x50) text = buf.indexOf(0, 5) + 1; // past the statement's name
          if (
            buf
              .toString("latin1", text, Math.min(text + 16, 1 + len))
              .trimStart()
              .toUpperCase()
              .startsWith("COMMIT")
          )
            commits += 1;
        }
        buf = buf.subarray(1 + len);
      }
      if (buf.length > 0) rest = Buffer.from(buf);
      return query;
    };
    client.on("data", (chunk: Buffer) => {
      if (scan(chunk) && answered) {
        turns += 1;
        answered = false;
      }
      send(upstream, chunk);
    });
    upstream.on("data", (chunk: Buffer) => send(client, chunk, () => (answered = true)));
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", close).on("close", close);
    upstream.on("error", close).on("close", close);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  process.on("message", (request: { delayMs?: number; counts?: boolean; stop?: boolean }) => {
    if (request.delayMs !== undefined) {
      delayMs = request.delayMs;
      process.send?.({ delayMs });
    }
    if (request.counts) process.send?.({ turns, commits, held: heldCount, heldMs } satisfies ProxyCounts);
    if (request.stop) server.close(() => process.exit(0));
  });
  const address = server.address();
  process.send?.({ port: typeof address === "object" && address ? address.port : 0 });
}

/** The parent's handle on the proxy process. */
export class DelayProxy {
  private readonly child: ChildProcess;
  readonly port: number;

  private constructor(child: ChildProcess, port: number) {
    this.child = child;
    this.port = port;
  }

  static async start(targetPort: number): Promise<DelayProxy> {
    const child = fork(fileURLToPath(import.meta.url), ["--proxy", String(targetPort)], {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    const { port } = await new Promise<{ port: number }>((resolve) =>
      child.once("message", (m) => resolve(m as { port: number })),
    );
    return new DelayProxy(child, port);
  }

  /** `url` with its host and port replaced by the proxy's. */
  via(url: string): string {
    const u = new URL(url);
    u.hostname = "127.0.0.1";
    u.port = String(this.port);
    return u.toString();
  }

  private ask<T>(request: object): Promise<T> {
    return new Promise((resolve) => {
      this.child.once("message", (reply) => resolve(reply as T));
      this.child.send(request);
    });
  }

  /** Each way, for chunks sent from now on. */
  async setDelay(delayMs: number): Promise<void> {
    await this.ask({ delayMs });
  }

  counts(): Promise<ProxyCounts> {
    return this.ask({ counts: true });
  }

  async stop(): Promise<void> {
    const exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.send({ stop: true });
    await exited;
  }
}

/** Round trips and commits per message between two readings. */
export function perMessage(before: ProxyCounts, after: ProxyCounts, messages: number) {
  return {
    roundTrips: (after.turns - before.turns) / messages,
    commits: (after.commits - before.commits) / messages,
  };
}

const at = process.argv.indexOf("--proxy");
if (at >= 0) await serveProxy(Number(process.argv[at + 1]));
