import assert from "node:assert/strict";
import pg from "pg";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import { freePort } from "../../src/embedded/free-port.ts";
import { enqueue } from "../../src/outbox/enqueue.ts";
import { deriveMessageId } from "../../src/servicebus/message-id.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { startCli } from "../helpers/cli.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

import { getJson, waitUntilAsync } from "../helpers/http.ts";

const QUEUE = "sbinbox";

function env(extra: Record<string, string>, port: number): Record<string, string> {
  return {
    SBINBOX_QUEUE: QUEUE,
    PORT: String(port),
    SBINBOX_HTTP_HOST: "127.0.0.1",
    SBINBOX_OUTAGE_BACKOFF_MIN_MS: "100",
    SBINBOX_OUTAGE_BACKOFF_MAX_MS: "400",
    ...extra,
  };
}

/** `sbinbox relay` started while what it needs is down: it waits as the worker does (issue 18). */
describe("sbinbox relay start-up waits for its database and Service Bus", function () {
  this.timeout(90_000);
  const fixture = useLocalBroker();

  for (const down of ["database", "serviceBus"] as const) {
    it(`${down} down: healthz 200, readyz 503 saying so, SIGTERM exits 0 at once`, async function () {
      const deadPort = await freePort();
      const port = await freePort();
      const { child, done } = startCli(
        ["relay"],
        env(
          down === "database"
            ? {
                SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
                SBINBOX_POSTGRES_URL: `postgres://postgres:postgres@127.0.0.1:${deadPort}/none`,
              }
            : {
                SBINBOX_SERVICEBUS_CONNECTION_STRING: `Endpoint=sb://127.0.0.1:${deadPort};SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true`,
                SBINBOX_POSTGRES_URL: await createTestDatabase("relay_startup"),
              },
          port,
        ),
      );
      try {
        await waitUntilAsync(
          async () => (await getJson(port, "/readyz"))?.body[down] === "unreachable",
          `readyz reports ${down} unreachable`,
          30_000,
        );
        const readyz = (await getJson(port, "/readyz"))!;
        assert.equal(readyz.status, 503);
        assert.equal(readyz.body.status, "starting");
        assert.equal((await getJson(port, "/healthz"))?.status, 200, "alive while waiting");
        assert.equal(child.exitCode, null, "still running");
      } finally {
        child.kill("SIGTERM");
      }
      const signalledAt = Date.now();
      const result = await done;
      assert.equal(result.code, 0, result.stderr.slice(-2000));
      assert.match(result.stderr, /"msg":"stopped while waiting at start-up"/);
      assert.ok(Date.now() - signalledAt < 5_000, "at once");
    });
  }

  it("database started later: the relay gets ready and sends what was committed", async function () {
    const server = await EmbeddedPostgresServer.create();
    const url = await server.createDatabase("relay_startup_late");
    await server.stop();
    const port = await freePort();
    const { child, done } = startCli(
      ["relay"],
      env(
        { SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString, SBINBOX_POSTGRES_URL: url },
        port,
      ),
    );
    try {
      await waitUntilAsync(
        async () => (await getJson(port, "/readyz"))?.body.database === "unreachable",
        "readyz reports the database unreachable",
        30_000,
      );
      await server.start();
      await waitUntilAsync(async () => (await getJson(port, "/readyz"))?.status === 200, "ready", 30_000);
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      try {
        const client = await pool.connect();
        await client.query("BEGIN");
        await enqueue(client, { type: "RelayStarted", key: "1", body: { ok: true } });
        await client.query("COMMIT");
        client.release();
      } finally {
        await pool.end();
      }
      const receiver = fixture.client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
      try {
        const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 15_000 });
        assert.equal(m?.subject, "RelayStarted");
      } finally {
        await receiver.close();
      }
    } finally {
      child.kill("SIGTERM");
      const result = await done;
      await server.dispose();
      assert.equal(result.code, 0, result.stderr.slice(-2000));
    }
  });
});

/** The crash the outbox exists for, as a real process: SIGKILLed after the send, before the mark. */
describe("sbinbox relay killed between send and mark (a process, SIGKILL)", function () {
  this.timeout(90_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));

  it("a second relay resends after the lease, the broker drops the copy: one message, the row marked sent", async function () {
    const url = await createTestDatabase("relay_kill");
    const port = await freePort();
    const base = {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_POSTGRES_URL: url,
      SBINBOX_OUTBOX_LEASE_MS: "2000",
      SBINBOX_OUTBOX_SEND_TIMEOUT_MS: "1000",
      SBINBOX_OUTBOX_POLL_INTERVAL_MS: "200",
    };
    const messageId = deriveMessageId("RelayKilled", "1");
    const first = startCli(["relay"], env({ ...base, SBINBOX_FAULT_KILL_AFTER_SEND: messageId }, port));
    await waitUntilAsync(
      async () => (await getJson(port, "/readyz"))?.status === 200,
      "the first relay ready",
      30_000,
    );
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const client = await pool.connect();
      await client.query("BEGIN");
      await enqueue(client, { type: "RelayKilled", key: "1", body: {} });
      await client.query("COMMIT");
      client.release();
      const killed = await first.done;
      assert.equal(killed.signal, "SIGKILL", killed.stderr.slice(-2000));
      const second = startCli(["relay"], env(base, await freePort()));
      try {
        await waitUntilAsync(
          async () =>
            (
              await pool.query<{ n: number }>(
                `SELECT count(*)::int AS n FROM "Outbox" WHERE "SentUtc" IS NOT NULL`,
              )
            ).rows[0]!.n === 1,
          "the row marked sent by the second relay",
          30_000,
        );
      } finally {
        second.child.kill("SIGTERM");
        assert.equal((await second.done).code, 0);
      }
      const { rows } = await pool.query<{ attempts: number }>(`SELECT "Attempts" AS attempts FROM "Outbox"`);
      assert.equal(rows[0]!.attempts, 2, "sent twice");
    } finally {
      await pool.end();
    }
    const receiver = fixture.client.createReceiver(QUEUE, { receiveMode: "receiveAndDelete" });
    try {
      const got = await receiver.receiveMessages(10, { maxWaitTimeInMs: 2_000 });
      assert.deepEqual(
        got.filter((m) => m.messageId === messageId).length,
        1,
        "the broker dropped the resend",
      );
    } finally {
      await receiver.close();
    }
  });
});
