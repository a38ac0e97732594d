import { readFile } from "node:fs/promises";
import { createServer } from "node:net";

/** Listening ports are drawn from below this; Linux's default ephemeral range starts at 32768. */
const DEFAULT_EPHEMERAL_LOW = 32_768;
const LOWEST = 10_000;

/**
 * A port that is free on 127.0.0.1 now, for a server another process will start (PostgreSQL, a worker's HTTP
 * listener). It is drawn from below the OS's ephemeral range: a port from inside it (what `listen(0)` gives) can
 * be taken by any outgoing connection in the moment between this check and the other process's listen, which
 * is what happened under the chaos run's churn of connections.
 */
export async function freePort(): Promise<number> {
  const high = await ephemeralLow();
  for (let attempt = 0; attempt < 50; attempt += 1) {
    const port = LOWEST + Math.floor(Math.random() * (high - LOWEST));
    if ((await tryListen(port)) !== undefined) return port;
  }
  const assigned = await tryListen(0);
  if (assigned === undefined) throw new Error("could not find a free port on 127.0.0.1");
  return assigned;
}

async function ephemeralLow(): Promise<number> {
  try {
    const text = await readFile("/proc/sys/net/ipv4/ip_local_port_range", "utf8");
    const low = Number(text.trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > LOWEST + 1_000 ? low : DEFAULT_EPHEMERAL_LOW;
  } catch {
    return DEFAULT_EPHEMERAL_LOW;
  }
}

/** Listens on `port` (0: any) and closes again; the port it got, or undefined when it was taken. */
function tryListen(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(undefined));
    server.listen(port, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(address && typeof address === "object" ? address.port : undefined));
    });
  });
}
