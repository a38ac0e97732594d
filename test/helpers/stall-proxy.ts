import net from "node:net";

/**
 * A TCP proxy on 127.0.0.1 in front of a server, for tests: `stall()` stops forwarding in both directions
 * without closing anything (as when packets are dropped and no reset comes), `resume()` forwards again, `reset()`
 * drops every connection at once (as a load balancer's failover does) and forwards the new ones, stalled or not.
 */
export class StallProxy {
  readonly port: number;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private stalled = false;

  private constructor(server: net.Server, port: number) {
    this.server = server;
    this.port = port;
  }

  static async start(targetPort: number): Promise<StallProxy> {
    const accepted: { proxy?: StallProxy } = {};
    const server = net.createServer((client) => accepted.proxy?.accept(client, targetPort));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    accepted.proxy = new StallProxy(server, (server.address() as net.AddressInfo).port);
    return accepted.proxy;
  }

  get connections(): number {
    return this.sockets.size / 2;
  }

  stall(): void {
    this.stalled = true;
    for (const socket of this.sockets) socket.pause();
  }

  resume(): void {
    this.stalled = false;
    for (const socket of this.sockets) socket.resume();
  }

  /** Destroys every connection through the proxy (both sides see a reset); new ones are accepted as before. */
  reset(): void {
    this.stalled = false;
    for (const socket of this.sockets) socket.resetAndDestroy();
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket, targetPort: number): void {
    const upstream = net.connect(targetPort, "127.0.0.1");
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      this.sockets.add(from);
      // Forward by hand: while paused nothing is read, so nothing is forwarded and nothing is lost.
      from.on("data", (chunk) => to.write(chunk));
      from.on("close", () => {
        this.sockets.delete(from);
        to.destroy();
      });
      from.on("error", () => from.destroy());
      if (this.stalled) from.pause();
    }
  }
}
