import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { freePort } from "../../src/embedded/free-port.ts";
import { waitUntil } from "../helpers/broker.ts";
import { startCli } from "../helpers/cli.ts";

/** A client in its own process: peeks once (so its connection is open), then stays subscribed. */
const CLIENT = `
const { ServiceBusClient } = require("@azure/service-bus");
const client = new ServiceBusClient(process.argv[1]);
const receiver = client.createReceiver("sbinbox");
receiver.peekMessages(1).then(() => {
  receiver.subscribe({ processMessage: async () => {}, processError: async () => {} });
  process.stdout.write("attached\\n");
});
`;

/**
 * `sbinbox broker` used to print "broker stopped" and then stay up for up to 30 s with a client attached: rhea's
 * heartbeat timer of each connection outlived the destroyed socket.
 */
describe("sbinbox broker stops promptly with clients attached", function () {
  this.timeout(60_000);

  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    it(`${signal} with a subscribed receiver: "broker stopped" and exit 0 at once`, async function () {
      const port = await freePort();
      const { child, done } = startCli(["broker", "--port", String(port)], {});
      let client: ChildProcess | undefined;
      try {
        let stdout = "";
        child.stdout!.on("data", (d: string) => (stdout += d));
        await waitUntil(
          () => stdout.includes("Endpoint=") || child.exitCode !== null,
          "the broker listens",
          30_000,
        );
        const connectionString = stdout
          .split("\n")
          .find((l) => l.startsWith("Endpoint="))!
          .trim();
        client = spawn(process.execPath, ["-e", CLIENT, connectionString], {
          stdio: ["ignore", "pipe", "inherit"],
        });
        let clientOut = "";
        client.stdout!.setEncoding("utf8").on("data", (d: string) => (clientOut += d));
        await waitUntil(() => clientOut.includes("attached"), "the client is attached", 30_000);
        const signalledAt = Date.now();
        child.kill(signal);
        // Bounded: a broker that hangs fails the test here, not at mocha's timeout with both processes left up.
        let timer: NodeJS.Timeout | undefined;
        const result = await Promise.race([
          done,
          new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(new Error(`still running 10 s after ${signal}`)), 10_000);
          }),
        ]).finally(() => clearTimeout(timer));
        const tookMs = Date.now() - signalledAt;
        assert.equal(result.code, 0, result.stderr);
        assert.match(result.stdout, /broker stopped\n$/);
        // Before the fix it stayed up for as long as rhea's heartbeat timer had left to run: up to 30 s (half
        // the 60 s idle timeout the SDK's connection advertises); now it is the close handshake.
        assert.ok(tookMs < 5_000, `exited ${tookMs} ms after ${signal}`);
      } finally {
        // Whatever failed above, neither process outlives the test.
        client?.kill("SIGKILL");
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      }
    });
  }
});
