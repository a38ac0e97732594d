// The chaos run's external system: a small HTTP API on 127.0.0.1 that the chaos process owns, so it outlives the
// worker processes it SIGKILLs and the final comparison can read every call and every effect. It behaves as a real
// mail or payment API with idempotency keys does: the first accepted call with a key makes the effect, any later
// call with that key gets the first result back and makes none, and a call made while an earlier one with the same
// key is still being answered gets 409 `idempotency_key_in_use` (as Stripe answers it), not the first result. Some
// keys meet failures on their first calls, and the whole API can be taken down (every connection is reset at once,
// and counted) and brought back.
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

export interface Effect {
  readonly to: string;
  readonly id: number;
}

export interface KeyRecord {
  calls: number;
  /**
   * Every effect made under this key, in order. One at most while the API dedupes; kept as a list so that a
   * second effect under one key (the harm the comparison looks for) is recorded rather than overwritten.
   */
  readonly effects: Effect[];
  /** A call with this key is being answered; another one now gets 409 `idempotency_key_in_use`. */
  inFlight: boolean;
}

export interface DownstreamOptions {
  /** False turns the API's deduplication off (every accepted call makes an effect): for the test that the
   * comparison catches a doubled mail. */
  readonly dedupe?: boolean;
}

export class FakeDownstream {
  readonly keys = new Map<string, KeyRecord>();
  /** Calls to /check (the transactional handlers' downstream), by key. */
  readonly checks = new Map<string, number>();
  /** POST /mail requests that arrived while up (connections reset while down are `refusedWhileDown`). */
  calls = 0;
  /** Effects made, over all keys. */
  effects = 0;
  /** Answers 409 `idempotency_key_in_use`: a same-key call arrived while the first was still being answered. */
  keyInUse = 0;
  /** Connections reset because the API was down: calls the outage refused. */
  refusedWhileDown = 0;
  private readonly dedupe: boolean;
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;
  private up = false;
  port = 0;

  private readonly plan: (key: string) => Behaviour;

  private constructor(plan: (key: string) => Behaviour, options: DownstreamOptions) {
    this.plan = plan;
    this.dedupe = options.dedupe ?? true;
    this.server = createServer((req, res) => void this.serve(req, res));
    this.server.on("connection", (socket) => {
      // Down: the port stays open so that each attempt can be counted, and is reset at once, as a refusal would be.
      if (!this.up) {
        this.refusedWhileDown += 1;
        socket.resetAndDestroy();
        return;
      }
      this.sockets.add(socket);
      socket.on("close", () => this.sockets.delete(socket));
    });
  }

  static async start(
    plan: (key: string) => Behaviour,
    options: DownstreamOptions = {},
  ): Promise<FakeDownstream> {
    const api = new FakeDownstream(plan, options);
    await api.listen(0);
    return api;
  }

  /** Keys under which more than one effect was made: a mail sent twice. */
  get doubledKeys(): number {
    return [...this.keys.values()].filter((r) => r.effects.length > 1).length;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get isUp(): boolean {
    return this.up;
  }

  /** Down: open connections are cut and every new one is reset (ECONNRESET for the caller) and counted. */
  goDown(): Promise<void> {
    if (!this.up) return Promise.resolve();
    this.up = false;
    for (const socket of this.sockets) socket.destroy();
    return Promise.resolve();
  }

  /** Up again, on the same port. */
  comeUp(): Promise<void> {
    this.up = true;
    return Promise.resolve();
  }

  async close(): Promise<void> {
    this.up = false;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const socket of this.sockets) socket.destroy();
    await closed;
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
    const record = this.keys.get(key) ?? { calls: 0, effects: [], inFlight: false };
    this.keys.set(key, record);
    record.calls += 1;
    if (this.dedupe && record.inFlight) {
      this.keyInUse += 1;
      return answer(res, 409, {
        error: { code: "idempotency_key_in_use", message: "a request with this key is still in progress" },
      });
    }
    // A repeated key: the first result, no second effect, whatever the key's failures were.
    const first = record.effects[0];
    if (this.dedupe && first) return answer(res, 200, { id: first.id, repeated: true });
    const behaviour = this.plan(key);
    if (behaviour.kind === "unavailable" && record.calls <= behaviour.calls)
      return answer(res, 503, { error: "unavailable" });
    if (behaviour.kind === "retry-after" && record.calls === 1) {
      res.setHeader("retry-after", String(behaviour.seconds));
      return answer(res, 503, { error: "unavailable" });
    }
    this.effects += 1;
    const effect = { to, id: this.effects };
    record.effects.push(effect);
    if (behaviour.kind === "reset-after-effect" && record.calls === 1) {
      req.socket.resetAndDestroy();
      return;
    }
    if (behaviour.kind === "slow" && record.calls === 1) {
      record.inFlight = true;
      await new Promise((resolve) => setTimeout(resolve, behaviour.ms));
      record.inFlight = false;
    }
    answer(res, 200, { id: effect.id, repeated: false });
  }
}

function answer(res: ServerResponse, status: number, body: object): void {
  if (res.destroyed) return;
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}
