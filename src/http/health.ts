import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * What /readyz answers: whether the process is ready, and each component's state in one word. It is public
 * (no credentials: anyone who reaches the app can call it), so it carries no error text and no counters.
 * App Service's health check does not call it: it pings only its configured path, /healthz in the Bicep.
 */
export interface ReadinessReport {
  readonly ready: boolean;
  /** starting, running, paused, stopping. */
  readonly status: string;
  /** A component's state: "ok", "unreachable", "refused", "waiting", "attached", "detached", "silent". */
  readonly [component: string]: string | boolean;
}

export interface HealthServerOptions {
  readonly port: number;
  readonly host: string;
  readonly readiness: () => Promise<ReadinessReport>;
  /** A readiness check that threw: the answer is a bare 503, the error goes here (to the log). */
  readonly onError?: (error: unknown) => void;
}

export interface HealthServer {
  readonly port: number;
  close(): Promise<void>;
}

/** A state word: whatever else a report holds (a message, a number) never leaves the process. */
const WORD = /^[a-z][a-z-]{0,31}$/i;

/**
 * `/healthz`: the process is alive, 200 from the moment it listens, start-up included. App Service's container
 * start probe and its health check (healthCheckPath in the Bicep) call this one: an instance waiting for its
 * database is not taken out of rotation or replaced, which would not bring the database back.
 * `/readyz`: JSON, 200 when the receiver is attached and the database answers, 503 otherwise, with the reason
 * as state words.
 */
export async function startHealthServer(options: HealthServerOptions): Promise<HealthServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" }).end();
      return;
    }
    if (path === "/healthz" || path === "/") {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ status: "alive" }));
      return;
    }
    if (path === "/readyz") {
      options
        .readiness()
        .then((report) => {
          res
            .writeHead(report.ready ? 200 : 503, { "content-type": "application/json" })
            .end(JSON.stringify(publicReport(report)));
        })
        .catch((error: unknown) => {
          options.onError?.(error);
          res
            .writeHead(503, { "content-type": "application/json" })
            .end(JSON.stringify({ ready: false, status: "unknown" }));
        });
      return;
    }
    res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: "not found" }));
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** `ready` and the fields whose value is a state word; anything else is left out of the public answer. */
export function publicReport(report: ReadinessReport): Record<string, string | boolean> {
  const out: Record<string, string | boolean> = { ready: report.ready === true };
  for (const [key, value] of Object.entries(report)) {
    if (key !== "ready" && typeof value === "string" && WORD.test(value)) out[key] = value;
  }
  return out;
}
