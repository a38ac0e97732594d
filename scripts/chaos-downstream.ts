// The chaos run's external system: a small HTTP API on 127.0.0.1 that the chaos process owns, so it outlives the
// worker processes it SIGKILLs and the final comparison can read every call and every effect. It behaves as a real
// mail or payment API with idempotency keys does: the first accepted call with a key makes the effect, any later
// call with that key gets the first result back and makes none. Some keys meet failures on their first calls,
// and the whole API can be taken down (its port refuses connections) and brought back.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/** What the API does with the first calls for one idempotency key; later calls are answered normally. */
export type Behaviour =
  /** Answer 503 to the first `calls` calls, with no effect. */
  | { readonly kind: "unavailable"; readonly calls: number }
  /** Answer 503 with `Retry-After: seconds` to the first call, with no effect. */
  | { readonly kind: "retry-after"; readonly seconds: number }
  /** Make the effect on the first call, then reset the connection: the caller never learns it happened. */
  | { readonly kind: "reset-after-effect" }
  /** Make the effect on the first call at once, answer it only after `ms`. */
  | { readonly kind: "slow"; readonly ms: number }
  | { readonly kind: "normal" };

export interface KeyRecord {
  calls: number;
  /** The recipient the effect went to; set by the first call that made it. */
  effect?: { readonly to: string; readonly id: number };
}

export class FakeDownstream {
  readonly keys = new Map<string, KeyRecord>();
  /** Calls to /check (the transactional handlers' downstream), by key. */
  readonly checks = new Map<string, number>();
  /** Connections refused or cut while down are not seen here; these are the requests that arrived. */
  calls = 0;
  /** Effects made: one per key at most, by construction; what the comparison checks is which keys and recipients. */
  effects = 0;
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;
  private up = false;
  port = 0;

  private readonly plan: (key: string) => Behaviour;

  private constructor(plan: (key: string) => Behaviour) {
    this.plan = plan;
    this.server = createServer((req, res) => void this.serve(req, res));
    this.server.on("connection", (socket) => {
      this.sockets.add(socket);
      socket.on("close", () => this.sockets.delete(socket));
    });
  }

  static async start(plan: (key: string) => Behaviour): Promise<FakeDownstream> {
    const api = new FakeDownstream(plan);
    await api.listen(0);
    return api;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get isUp(): boolean {
    return this.up;
  }

  /** Down: the port is closed, so callers get ECONNREFUSED; open connections are cut. */
  async goDown(): Promise<void> {
    if (!this.up) return;
    this.up = false;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }

  /** Up again on the same port, so the workers' setting still points at it. */
  async comeUp(): Promise<void> {
    if (this.up) return;
    for (let tries = 0; ; tries += 1) {
      try {
        await this.listen(this.port);
        return;
      } catch (error) {
        // The port is ours unless another process took it in the meantime; give it a moment, then say so.
        if (tries >= 20) throw error;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  }

  async close(): Promise<void> {
    await this.goDown();
  }

  private listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const onError = (error: Error) => reject(error);
      this.server.once("error", onError);
      this.server.listen(port, "127.0.0.1", () => {
        this.server.removeListener("error", onError);
        this.port = (this.server.address() as AddressInfo).port;
        this.up = true;
        resolve();
      });
    });
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const key = req.headers["idempotency-key"];
    if (typeof key !== "string" || key === "") return answer(res, 400, { error: "no Idempotency-Key" });
    if (req.method === "GET" && req.url === "/check") {
      const n = (this.checks.get(key) ?? 0) + 1;
      this.checks.set(key, n);
      // A read with no effect: only the first calls' failures apply.
      const behaviour = this.plan(key);
      if (behaviour.kind === "unavailable" && n <= behaviour.calls)
        return answer(res, 503, { error: "unavailable" });
      return answer(res, 200, { ok: true });
    }
    if (req.method !== "POST" || req.url !== "/mail") return answer(res, 404, { error: "no such endpoint" });
    let to: unknown;
    try {
      to = (JSON.parse(Buffer.concat(chunks).toString("utf8")) as { to?: unknown }).to;
    } catch {
      return answer(res, 400, { error: "body is not JSON" });
    }
    if (typeof to !== "string") return answer(res, 400, { error: "no recipient" });
    this.calls += 1;
    const record = this.keys.get(key) ?? { calls: 0 };
    this.keys.set(key, record);
    record.calls += 1;
    // A repeated key: the first result, no second effect, whatever the key's failures were.
    if (record.effect) return answer(res, 200, { id: record.effect.id, repeated: true });
    const behaviour = this.plan(key);
    if (behaviour.kind === "unavailable" && record.calls <= behaviour.calls)
      return answer(res, 503, { error: "unavailable" });
    if (behaviour.kind === "retry-after" && record.calls === 1) {
      res.setHeader("retry-after", String(behaviour.seconds));
      return answer(res, 503, { error: "unavailable" });
    }
    this.effects += 1;
    record.effect = { to, id: this.effects };
    if (behaviour.kind === "reset-after-effect" && record.calls === 1) {
      req.socket.resetAndDestroy();
      return;
    }
    if (behaviour.kind === "slow" && record.calls === 1)
      await new Promise((resolve) => setTimeout(resolve, behaviour.ms));
    answer(res, 200, { id: record.effect.id, repeated: false });
  }
}

function answer(res: ServerResponse, status: number, body: object): void {
  if (res.destroyed) return;
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}
