import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface ReadinessReport {
  readonly ready: boolean;
  readonly [key: string]: unknown;
}

export interface HealthServerOptions {
  readonly port: number;
  readonly host: string;
  readonly readiness: () => Promise<ReadinessReport>;
}

export interface HealthServer {
  readonly port: number;
  close(): Promise<void>;
}

/**
 * `/healthz`: the process is alive (App Service's container start probe and liveness).
 * `/readyz`: JSON, 200 when the receiver is attached and the database answers, 503 otherwise.
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
            .end(JSON.stringify(report));
        })
        .catch((error: unknown) => {
          res
            .writeHead(503, { "content-type": "application/json" })
            .end(JSON.stringify({ ready: false, error: String(error) }));
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
