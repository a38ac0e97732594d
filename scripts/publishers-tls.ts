// A TLS front for the local broker, for Debian's Python SDK (azure-servicebus 7.8.2 on uamqp): uamqp-c connects
// over TLS only, to port 5671 of the endpoint's host (a custom endpoint switches it to WebSockets), and that SDK
// predates the connection string's UseDevelopmentEmulator. So the check gives it a loopback address of its own
// (127.x.y.z, port 5671, free on any machine that runs no broker there) with a certificate made for it by openssl,
// and pipes each connection to the plain broker. A test aid beside the broker, as Service Bus itself is TLS.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { createServer, type Server } from "node:tls";
import { LOCAL_KEY, LOCAL_KEY_NAME } from "../src/localbroker/broker.ts";

export interface TlsFront {
  /** A connection string for the SDK: `Endpoint=sb://<address>/` (port 5671) with the local broker's key. */
  readonly connectionString: string;
  /** The self-signed certificate, for the SDK's `connection_verify`. */
  readonly caFile: string;
  close(): Promise<void>;
}

export async function startTlsFront(brokerPort: number, folder: string): Promise<TlsFront> {
  const address = `127.${1 + (process.pid % 250)}.${Math.floor(Math.random() * 250) + 1}.${Math.floor(Math.random() * 250) + 1}`;
  const key = join(folder, "tls-key.pem");
  const cert = join(folder, "tls-cert.pem");
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "1",
      "-subj",
      `/CN=${address}`,
      "-addext",
      `subjectAltName=IP:${address}`,
    ],
    { stdio: "ignore" },
  );
  const open = new Set<{ destroy(): void }>();
  const server: Server = createServer({ key: readFileSync(key), cert: readFileSync(cert) }, (socket) => {
    const upstream = connect(brokerPort, "127.0.0.1");
    open.add(socket);
    socket.on("close", () => open.delete(socket));
    socket.pipe(upstream).pipe(socket);
    socket.on("error", () => upstream.destroy());
    upstream.on("error", () => socket.destroy());
    socket.on("close", () => upstream.destroy());
    upstream.on("close", () => socket.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(5671, address, () => resolve());
  });
  return {
    connectionString: `Endpoint=sb://${address}/;SharedAccessKeyName=${LOCAL_KEY_NAME};SharedAccessKey=${LOCAL_KEY}`,
    caFile: cert,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of open) socket.destroy();
      }),
  };
}
