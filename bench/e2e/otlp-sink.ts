// A stand-in OTLP/HTTP collector on 127.0.0.1 for the CPU ledger: the worker's spans and metrics are exported as
// they would be to a real collector (serialised, compressed if asked, sent), answered 200 with an empty export
// response, and counted here, so a row that says "exported" can show that something was.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface SinkCounts {
  /** POSTs to /v1/traces and their bytes (each a batch of spans from the BatchSpanProcessor). */
  readonly traceRequests: number;
  readonly traceBytes: number;
  readonly metricRequests: number;
  readonly metricBytes: number;
}

export class OtlpSink {
  private readonly counts: { -readonly [K in keyof SinkCounts]: number };
  private readonly server: Server;
  /** The OTEL_EXPORTER_OTLP_ENDPOINT of the exporters. */
  readonly endpoint: string;

  private constructor(server: Server, endpoint: string, counts: OtlpSink["counts"]) {
    this.counts = counts;
    this.server = server;
    this.endpoint = endpoint;
  }

  static async start(): Promise<OtlpSink> {
    const counts = { traceRequests: 0, traceBytes: 0, metricRequests: 0, metricBytes: 0 };
    const server = createServer((request, response) => {
      let bytes = 0;
      request.on("data", (chunk: Buffer) => (bytes += chunk.length));
      request.on("end", () => {
        if (request.url === "/v1/traces") {
          counts.traceRequests += 1;
          counts.traceBytes += bytes;
        } else if (request.url === "/v1/metrics") {
          counts.metricRequests += 1;
          counts.metricBytes += bytes;
        }
        // An empty ExportTraceServiceResponse / ExportMetricsServiceResponse is zero bytes in protobuf and `{}` in
        // JSON: both mean every item was accepted.
        const json = String(request.headers["content-type"]).includes("json");
        response.writeHead(200, { "content-type": json ? "application/json" : "application/x-protobuf" });
        response.end(json ? "{}" : "");
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    return new OtlpSink(server, `http://127.0.0.1:${port}`, counts);
  }

  snapshot(): SinkCounts {
    return { ...this.counts };
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
