import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { z } from "zod";
import { renderPage } from "./page.ts";
import { PersonalDataRefused, type ConsoleService, type Filter, type Job } from "./service.ts";
import { createSignIn, same, type SignIn, type SignInOptions } from "./sign-in.ts";
import { refusalMessage } from "../servicebus/refusal.ts";

export interface ConsoleServer {
  /** The one-time sign-in link printed at start. */
  readonly url: string;
  /** Another one-time sign-in link (a second browser, a second operator on this machine). */
  newSignInLink(): string;
  close(): Promise<void>;
}

const MAX_BODY = 4 * 1024 * 1024;
const PAGE_LIMIT = 200;
/** A job's results as the page polls them: the counts always, the rows only up to this. */
const RESULT_ROWS = 500;

/**
 * The console's HTTP side. It acts with the operator's Service Bus rights, so beside the loopback bind it refuses
 * what another local user or a hostile web page could send: nothing is served without a session, which only the
 * one-time sign-in link printed at start gives (so the page's API token never goes to an unauthenticated request);
 * a Host that is not this server's is refused (DNS rebinding); any /api call needs the token the page carries (a
 * cross-site page cannot read it); a write whose Origin is not this server's or that is not JSON is refused (which
 * a cross-site form cannot send without a preflight).
 */
export async function startConsoleServer(
  service: ConsoleService,
  options: {
    host: string;
    port: number;
    allowHosts?: readonly string[];
    operator: string;
    signIn?: SignInOptions;
  },
): Promise<ConsoleServer> {
  const token = randomBytes(24).toString("base64url");
  const signIn = createSignIn(options.operator, options.signIn);
  let hosts = new Set<string>();
  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      // A reader without Data Receiver is told which role the page needs, not given the SDK's bare refusal.
      const refused = refusalMessage(error, "list", options.operator);
      if (!res.headersSent) send(res, refused ? 403 : 500, { error: refused ?? (error as Error).message });
      else res.end();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!hosts.has(req.headers.host ?? "")) return send(res, 421, { error: "unexpected Host header" });
    const url = new URL(req.url ?? "/", `http://${req.headers.host}`);
    if (tradeSignIn(signIn, req, url, res)) return;
    const operator = signIn.operatorOf(req.headers.cookie);
    if (operator === undefined)
      return send(res, 401, { error: "sign in with the one-time link the console printed at start" });
    if (req.method === "GET" && url.pathname === "/") return servePage(res, token);
    if (!url.pathname.startsWith("/api/")) return send(res, 404, { error: "not found" });
    if (!same(String(req.headers["x-sbinbox-token"] ?? ""), token))
      return send(res, 403, { error: "missing token" });
    if (req.method === "GET") return routeGet(service, url, operator, res);
    if (req.method !== "POST") return send(res, 405, { error: "method not allowed" });
    if (req.headers.origin !== `http://${req.headers.host}`)
      return send(res, 403, { error: "cross-origin write refused" });
    if (!(req.headers["content-type"] ?? "").startsWith("application/json"))
      return send(res, 415, { error: "JSON only" });
    let input: unknown;
    try {
      input = JSON.parse(await readBody(req));
    } catch (error) {
      return send(res, 400, { error: `bad request body: ${(error as Error).message}` });
    }
    if (url.pathname === "/api/sign-out") return signOut(signIn, req, res);
    return routePost(service, url, input, operator, res);
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
  const link = () => `http://${shown}:${port}/?signin=${signIn.newLink()}`;
  return {
    url: link(),
    newSignInLink: link,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** A GET / carrying an unused sign-in secret: traded for a session cookie, and the secret is spent. */
function tradeSignIn(signIn: SignIn, req: IncomingMessage, url: URL, res: ServerResponse): boolean {
  const secret = url.searchParams.get("signin");
  if (req.method !== "GET" || url.pathname !== "/" || secret === null) return false;
  const traded = signIn.trade(secret);
  if ("refused" in traded) {
    send(res, 401, { error: traded.refused });
    return true;
  }
  res.writeHead(303, {
    location: "/",
    "set-cookie": `${signIn.cookieName}=${traded.session}; HttpOnly; SameSite=Strict; Path=/`,
    ...securityHeaders,
  });
  res.end();
  return true;
}

/** Ends the session (a run it started goes on: the console, not the browser, runs it) and clears the cookie. */
function signOut(signIn: SignIn, req: IncomingMessage, res: ServerResponse): void {
  signIn.signOut(req.headers.cookie);
  res.writeHead(200, {
    "content-type": "application/json",
    "set-cookie": `${signIn.cookieName}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`,
    ...securityHeaders,
  });
  res.end(JSON.stringify({ signedOut: true }));
}

function servePage(res: ServerResponse, token: string): void {
  const nonce = randomBytes(16).toString("base64");
  res.writeHead(200, {
    "content-type": "text/html; charset=utf-8",
    "content-security-policy": `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
    ...securityHeaders,
  });
  res.end(renderPage({ token, nonce }));
}

async function routeGet(
  service: ConsoleService,
  url: URL,
  operator: string,
  res: ServerResponse,
): Promise<void> {
  const q = url.searchParams;
  if (url.pathname === "/api/state")
    return send(res, 200, { ...(await service.state({ fresh: q.get("fresh") === "1" })), operator });
  if (url.pathname === "/api/messages") {
    const filter = filterSchema.safeParse(
      Object.fromEntries([...q].filter(([k, v]) => k in filterShape && v !== "")),
    );
    if (!filter.success)
      return send(res, 400, { error: filter.error.issues.map((i) => i.message).join("; ") });
    const offset = Math.max(0, Number(q.get("offset") ?? 0) || 0);
    const limit = Math.min(PAGE_LIMIT, Math.max(1, Number(q.get("limit") ?? 50) || 50));
    try {
      return send(res, 200, await service.messages(filter.data, offset, limit));
    } catch (error) {
      return send(res, 400, { error: (error as Error).message });
    }
  }
  if (url.pathname === "/api/body") {
    let found;
    try {
      found = await service.body(q.get("seq") ?? "", q.get("unmasked") === "1");
    } catch (error) {
      if (error instanceof PersonalDataRefused) return send(res, 403, { error: error.message });
      throw error;
    }
    return found === undefined
      ? send(res, 404, { error: "no such message" })
      : send(res, 200, { body: found.body, properties: found.properties, masked: found.masked });
  }
  if (url.pathname === "/api/running") {
    const job = service.running();
    return send(res, 200, job ? summary(job) : {});
  }
  const job = /^\/api\/jobs\/([\w-]+)$/.exec(url.pathname);
  if (job) {
    const found = service.job(job[1]!);
    return found ? send(res, 200, summary(found)) : send(res, 404, { error: "no such job" });
  }
  return send(res, 404, { error: "not found" });
}

async function routePost(
  service: ConsoleService,
  url: URL,
  input: unknown,
  operator: string,
  res: ServerResponse,
): Promise<void> {
  if (url.pathname === "/api/plan" && (input as { action?: unknown } | null)?.action === "edit") {
    const parsed = editSchema.safeParse(input);
    if (!parsed.success)
      return send(res, 400, {
        error: 'an edit is {"action": "edit", "sequenceNumber": "<digits>", "body": "<text>"}',
      });
    try {
      return send(res, 200, await service.planEdit(parsed.data.sequenceNumber, parsed.data.body, operator));
    } catch (error) {
      return send(res, 409, { error: (error as Error).message });
    }
  }
  if (url.pathname === "/api/plan") {
    const parsed = planSchema.safeParse(input);
    if (!parsed.success)
      return send(res, 400, {
        error:
          'send {"action": "replay" | "purge"} with "sequenceNumbers" (a non-empty list of digit strings) or ' +
          `"filter": ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
      });
    const { action, setAside, ...rest } = parsed.data;
    try {
      return send(res, 200, await service.plan(action, rest, operator, { setAside: setAside === true }));
    } catch (error) {
      return send(res, 409, { error: (error as Error).message });
    }
  }
  if (url.pathname === "/api/run") {
    const token = (input as { token?: unknown } | null)?.token;
    if (typeof token !== "string") return send(res, 400, { error: "token required" });
    try {
      return send(res, 202, summary(service.run(token, operator)));
    } catch (error) {
      return send(res, 409, { error: (error as Error).message });
    }
  }
  return send(res, 404, { error: "not found" });
}

const filterShape = {
  reason: z.string().min(1).optional(),
  type: z.string().min(1).optional(),
  messageId: z.string().min(1).optional(),
  enqueuedFrom: z.iso.datetime({ offset: true }).optional(),
  enqueuedTo: z.iso.datetime({ offset: true }).optional(),
};
const filterSchema: z.ZodType<Filter> = z.object(filterShape).strict();
const planSchema = z.union([
  z.object({
    action: z.enum(["replay", "purge"]),
    sequenceNumbers: z.array(z.string().regex(/^\d+$/)).min(1),
    setAside: z.boolean().optional(),
  }),
  z.object({
    action: z.enum(["replay", "purge"]),
    // An empty filter would mean "everything" by omission: a write needs at least one part.
    filter: filterSchema.refine((f) => Object.keys(f).length > 0, "a filter needs at least one part"),
    setAside: z.boolean().optional(),
  }),
]);

const editSchema = z.object({
  action: z.literal("edit"),
  sequenceNumber: z.string().regex(/^\d+$/),
  body: z.string(),
});

/** A job as the page polls it: every count, and the first rows of its results. */
function summary(job: Job): Omit<Job, "results"> & { results: Job["results"]; moreResults: number } {
  return {
    ...job,
    results: job.results.slice(0, RESULT_ROWS),
    moreResults: Math.max(0, job.results.length - RESULT_ROWS),
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
