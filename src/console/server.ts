import { randomBytes, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Selection } from "../servicebus/dead-letter-select.ts";
import { renderPage } from "./page.ts";
import type { ConsoleService } from "./service.ts";

export interface ConsoleServer {
  readonly url: string;
  close(): Promise<void>;
}

const MAX_BODY = 256 * 1024;

/**
 * The console's HTTP side. It acts with the operator's Service Bus rights, so beside the loopback bind it refuses
 * what a hostile web page in the same browser could send: a Host that is not this server's (DNS rebinding), any
 * /api call without the per-process token the page carries (a cross-site page cannot read it), and a write whose
 * Origin is not this server's or that is not JSON (which a cross-site form cannot send without a preflight).
 */
export async function startConsoleServer(
  service: ConsoleService,
  options: { host: string; port: number; allowHosts?: readonly string[]; access?: boolean },
): Promise<ConsoleServer> {
  const token = randomBytes(24).toString("base64url");
  // Served beyond loopback, the page's token would go to whoever asks: there, a secret in the printed URL is
  // traded once for an HttpOnly cookie, and nothing is served without one of the two (the URL's secret is what the
  // operator passes on; plain HTTP, so only across a network the operator trusts, or through an SSH tunnel).
  const access = options.access ? randomBytes(24).toString("base64url") : undefined;
  const ACCESS_COOKIE = "sbinbox-access";
  let hosts = new Set<string>();
  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) send(res, 500, { error: (error as Error).message });
      else res.end();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!hosts.has(req.headers.host ?? "")) return send(res, 421, { error: "unexpected Host header" });
    const url = new URL(req.url ?? "/", `http://${req.headers.host}`);
    if (access !== undefined) {
      if (
        req.method === "GET" &&
        url.pathname === "/" &&
        sameToken(url.searchParams.get("access") ?? "", access)
      ) {
        res.writeHead(303, {
          location: "/",
          "set-cookie": `${ACCESS_COOKIE}=${access}; HttpOnly; SameSite=Strict; Path=/`,
          ...securityHeaders,
        });
        res.end();
        return;
      }
      if (!sameToken(cookie(req, ACCESS_COOKIE), access))
        return send(res, 401, { error: "open the URL the console printed (it carries the access secret)" });
    }
    if (req.method === "GET" && url.pathname === "/") {
      const nonce = randomBytes(16).toString("base64");
      res.writeHead(200, {
        "content-type": "text/html; charset=utf-8",
        "content-security-policy": `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
        ...securityHeaders,
      });
      res.end(renderPage({ token, nonce }));
      return;
    }
    if (!url.pathname.startsWith("/api/")) return send(res, 404, { error: "not found" });
    if (!sameToken(req.headers["x-sbinbox-token"], token)) return send(res, 403, { error: "missing token" });
    if (req.method === "GET") {
      if (url.pathname === "/api/state") return send(res, 200, await service.state());
      if (url.pathname === "/api/body") {
        const body = await service.body(url.searchParams.get("seq") ?? "");
        return body === undefined ? send(res, 404, { error: "no such message" }) : send(res, 200, { body });
      }
      const job = /^\/api\/jobs\/([\w-]+)$/.exec(url.pathname);
      if (job) {
        const found = service.job(job[1]!);
        return found ? send(res, 200, found) : send(res, 404, { error: "no such job" });
      }
      return send(res, 404, { error: "not found" });
    }
    if (req.method !== "POST") return send(res, 405, { error: "method not allowed" });
    if (req.headers.origin !== `http://${req.headers.host}`)
      return send(res, 403, { error: "cross-origin write refused" });
    if (!(req.headers["content-type"] ?? "").startsWith("application/json"))
      return send(res, 415, { error: "JSON only" });
    let input: Record<string, unknown>;
    try {
      input = JSON.parse(await readBody(req)) as Record<string, unknown>;
    } catch (error) {
      return send(res, 400, { error: `bad request body: ${(error as Error).message}` });
    }
    if (url.pathname === "/api/plan") {
      const action = input.action;
      if (action !== "replay" && action !== "purge")
        return send(res, 400, { error: 'action must be "replay" or "purge"' });
      const selection = parseSelection(input);
      if (typeof selection === "string") return send(res, 400, { error: selection });
      try {
        return send(res, 200, await service.plan(action, selection));
      } catch (error) {
        return send(res, 409, { error: (error as Error).message });
      }
    }
    if (url.pathname === "/api/run") {
      if (typeof input.token !== "string") return send(res, 400, { error: "token required" });
      try {
        return send(res, 202, service.run(input.token));
      } catch (error) {
        return send(res, 409, { error: (error as Error).message });
      }
    }
    return send(res, 404, { error: "not found" });
  }

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const shown = options.host.includes(":") ? `[${options.host}]` : options.host;
  hosts = new Set(
    [shown, "127.0.0.1", "localhost", "[::1]", ...(options.allowHosts ?? [])].map(
      (name) => `${name}:${port}`,
    ),
  );
  return {
    url: `http://${shown}:${port}/${access === undefined ? "" : `?access=${access}`}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

const securityHeaders = {
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store",
  "x-frame-options": "DENY",
};

function send(res: ServerResponse, status: number, value: unknown): void {
  res
    .writeHead(status, { "content-type": "application/json", ...securityHeaders })
    .end(JSON.stringify(value));
}

function cookie(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? "").split(";")) {
    const [key, ...value] = part.trim().split("=");
    if (key === name) return value.join("=");
  }
  return undefined;
}

function sameToken(given: string | string[] | undefined, expected: string): boolean {
  if (typeof given !== "string") return false;
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY) throw new Error("too large");
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** A group (reason) or ticked messages (sequence numbers); nothing else is accepted for a write. */
function parseSelection(input: Record<string, unknown>): Selection | string {
  const { reason, sequenceNumbers } = input;
  if (typeof reason === "string" && reason !== "" && sequenceNumbers === undefined) return { reason };
  if (
    reason === undefined &&
    Array.isArray(sequenceNumbers) &&
    sequenceNumbers.length > 0 &&
    sequenceNumbers.every((s) => typeof s === "string" && /^\d+$/.test(s))
  )
    return { sequenceNumbers: sequenceNumbers as string[] };
  return "select a reason, or sequenceNumbers (a non-empty list of digit strings)";
}
