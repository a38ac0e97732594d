import assert from "node:assert/strict";
import { startApp, type App } from "../../src/app/app.ts";
import { StartupAbortedError, StartupFailedError } from "../../src/app/startup.ts";
import { openDatabase, type Database } from "../../src/app/database.ts";
import { loadConfig } from "../../src/config/load.ts";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import { freePort } from "../../src/embedded/free-port.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { LocalBroker } from "../../src/localbroker/broker.ts";
import { createServiceBusClient } from "../../src/servicebus/client.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { startCli } from "../helpers/cli.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { exampleDatabase } from "../helpers/worker.ts";
import { countCredits } from "../helpers/worker.ts";

import { getJson, type Probe } from "../helpers/http.ts";

const QUEUE = "sbinbox";
const BACKOFF_MAX_MS = 400;

/** Keeps fetching /readyz until stopped, so waitUntil can look at the latest answer. */
function pollReadyz(port: number): { latest(): Probe | undefined; stop(): void } {
  let latest: Probe | undefined;
  let running = true;
  void (async () => {
    while (running) {
      latest = (await getJson(port, "/readyz")) ?? latest;
      await new Promise((r) => setTimeout(r, 25));
    }
  })();
  return { latest: () => latest, stop: () => (running = false) };
}

function env(extra: Record<string, string>, port: number): Record<string, string> {
  return {
    SBINBOX_QUEUE: QUEUE,
    PORT: String(port),
    SBINBOX_HTTP_HOST: "127.0.0.1",
    SBINBOX_OUTAGE_BACKOFF_MIN_MS: "100",
    SBINBOX_OUTAGE_BACKOFF_MAX_MS: String(BACKOFF_MAX_MS),
    SBINBOX_GRACE_PERIOD_MS: "2000",
    SBINBOX_SWEEP_INTERVAL_MS: "0",
    ...extra,
  };
}

/** A logger whose lines the test reads, with the time each was written. */
function capturingLogger(): {
  logger: ReturnType<typeof createLogger>;
  lines: { at: number; line: string }[];
} {
  const lines: { at: number; line: string }[] = [];
  return {
    logger: createLogger({ level: "info", write: (line) => lines.push({ at: Date.now(), line }) }),
    lines,
  };
}

/** The database as `sbinbox migrate` leaves it: the worker only checks its schema. */
async function migrated(url: string): Promise<string> {
  const db = await exampleDatabase("", url);
  await db.close();
  return url;
}

describe("worker start-up waits for its database and Service Bus", function () {
  this.timeout(90_000);

  describe("database down at start (own PostgreSQL server, stopped)", function () {
    const fixture = useLocalBroker();
    let pgServer: EmbeddedPostgresServer;
    let url: string;
    let app: App | undefined;
    before(async () => {
      pgServer = await EmbeddedPostgresServer.create();
      url = await pgServer.createDatabase("startup_db_down");
      await migrated(url);
      await pgServer.stop();
    });
    after(async () => {
      await app?.stop();
      await pgServer?.dispose();
    });

    it("stays up (healthz 200, readyz 503 with the reason and no error text), gets ready within one back-off step of the database starting, then processes an event", async function () {
      const port = await freePort();
      const { logger, lines } = capturingLogger();
      const config = loadConfig({
        env: env(
          {
            SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
            SBINBOX_POSTGRES_URL: url,
          },
          port,
        ),
      });
      let started: App | undefined;
      let failed: unknown;
      const starting = startApp(config, { logger }).then(
        (a) => (started = a),
        (error: unknown) => (failed = error),
      );
      const readyz = pollReadyz(port);
      try {
        await waitUntil(
          () => readyz.latest()?.body.database === "unreachable" && readyz.latest()?.body.serviceBus === "ok",
          "readyz reports the database unreachable and Service Bus ok",
          30_000,
        );
        const during = readyz.latest()!;
        assert.equal(during.status, 503);
        assert.deepEqual(Object.keys(during.body).sort(), ["database", "ready", "serviceBus", "status"]);
        assert.equal(during.body.status, "starting");
        assert.doesNotMatch(JSON.stringify(during.body), /ECONNREFUSED|127\.0\.0\.1|stats/);
        assert.equal((await getJson(port, "/healthz"))?.status, 200, "alive while waiting");
        // A few retries go by: the process neither exits nor gives up.
        await waitUntil(
          () => lines.filter((l) => l.line.includes('"msg":"database still unreachable"')).length >= 3,
          "three retries",
          30_000,
        );
        assert.equal(started, undefined, "not started while the database is down");
        assert.equal(failed, undefined, "start-up did not fail");
        assert.match(
          lines.find((l) => l.line.includes("database unreachable at start-up"))!.line,
          /"level":"warn"/,
        );

        await pgServer.start();
        const upAt = Date.now();
        await starting;
        assert.equal(failed, undefined, `start-up failed: ${String(failed)}`);
        app = started!;
        const tookMs = Date.now() - upAt;
        const failedAfterUp = lines.filter(
          (l) => l.at > upAt && l.line.includes("database still unreachable"),
        );
        // An attempt already in flight when the server came up may still fail, and its line is written after upAt
        // (the app shares this process, so a busy event loop delays it); the attempt after it must succeed.
        assert.ok(
          failedAfterUp.length <= 1,
          `${failedAfterUp.length} attempts failed after the database came up`,
        );
        assert.ok(
          tookMs < BACKOFF_MAX_MS + 5_000,
          `ready ${tookMs} ms after the database came up (one back-off step is at most ${BACKOFF_MAX_MS} ms)`,
        );
        await waitUntil(() => readyz.latest()?.status === 200, "readyz 200", 10_000);
        assert.deepEqual(readyz.latest()!.body, {
          ready: true,
          status: "running",
          receiver: "attached",
          database: "ok",
          serviceBus: "ok",
        });
      } finally {
        readyz.stop();
      }

      const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
      const event = demoEvent("startup-db", 1);
      await publisher.publish(event.type, event.key, event.body);
      await publisher.close();
      const db: Database = await openDatabase(
        { kind: "postgres", url },
        { preCheck: false, maxConnections: 1 },
      );
      try {
        await waitUntil(() => app!.worker.stats.committed >= 1, "the event is applied", 20_000);
        assert.equal(await countCredits(db), 1);
      } finally {
        await db.close();
      }
    });
  });

  describe("Service Bus down at start", function () {
    let broker: LocalBroker | undefined;
    let app: App | undefined;
    after(async () => {
      await app?.stop();
      await broker?.stop();
    });

    it("stays up with readyz 503 (serviceBus unreachable), gets ready within one back-off step of the broker starting, then processes an event", async function () {
      const brokerPort = await freePort();
      const port = await freePort();
      const url = await migrated(await createTestDatabase("startup_broker_down"));
      const { logger, lines } = capturingLogger();
      const connectionString = `Endpoint=sb://localhost:${brokerPort};SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true`;
      const config = loadConfig({
        env: env({ SBINBOX_SERVICEBUS_CONNECTION_STRING: connectionString, SBINBOX_POSTGRES_URL: url }, port),
      });
      let started: App | undefined;
      let failed: unknown;
      const starting = startApp(config, { logger }).then(
        (a) => (started = a),
        (error: unknown) => (failed = error),
      );
      const readyz = pollReadyz(port);
      try {
        await waitUntil(
          () => readyz.latest()?.body.serviceBus === "unreachable" && readyz.latest()?.body.database === "ok",
          "readyz reports Service Bus unreachable and the database ok",
          30_000,
        );
        assert.equal(readyz.latest()!.status, 503);
        await waitUntil(
          () => lines.filter((l) => l.line.includes('"msg":"serviceBus still unreachable"')).length >= 3,
          "three retries",
          30_000,
        );
        assert.equal(started, undefined);
        assert.equal(failed, undefined);

        broker = await LocalBroker.start({ port: brokerPort, host: "127.0.0.1" });
        const upAt = Date.now();
        await starting;
        assert.equal(failed, undefined, `start-up failed: ${String(failed)}`);
        app = started!;
        const tookMs = Date.now() - upAt;
        const failedAfterUp = lines.filter(
          (l) => l.at > upAt && l.line.includes("serviceBus still unreachable"),
        );
        // As above: only a probe in flight when the broker came up may fail; the next succeeds.
        assert.ok(
          failedAfterUp.length <= 1,
          `${failedAfterUp.length} probes failed after the broker came up`,
        );
        assert.ok(tookMs < BACKOFF_MAX_MS + 5_000, `ready ${tookMs} ms after the broker came up`);
        await waitUntil(() => readyz.latest()?.status === 200, "readyz 200", 10_000);
      } finally {
        readyz.stop();
      }

      const client = createServiceBusClient({ connectionString: broker.connectionString });
      const publisher = createPublisher({ client, queue: QUEUE });
      const event = demoEvent("startup-sb", 1);
      await publisher.publish(event.type, event.key, event.body);
      await publisher.close();
      await client.close();
      await waitUntil(() => app!.worker.stats.committed >= 1, "the event is applied", 20_000);
      // Committed is counted at the decision, before the complete goes out: the queue empties once it is answered.
      await waitUntil(() => app!.worker.stats.settled >= 1, "the event's complete is answered", 20_000);
      assert.equal(broker.counts(QUEUE).active + broker.counts(QUEUE).locked, 0);
    });
  });

  describe("refusals", function () {
    const fixture = useLocalBroker();

    it("a queue that does not exist is a refusal: with SBINBOX_STARTUP_LIMIT_MS=0 start-up fails at once, naming Service Bus and the entity", async function () {
      const url = await migrated(await createTestDatabase("startup_no_queue"));
      const config = loadConfig({
        env: env(
          {
            SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
            SBINBOX_POSTGRES_URL: url,
            SBINBOX_QUEUE: "no-such-queue",
            SBINBOX_STARTUP_LIMIT_MS: "0",
          },
          0,
        ),
      });
      const error = await startApp(config, { logger: capturingLogger().logger }).then(
        () => assert.fail("started"),
        (e: unknown) => e,
      );
      assert.ok(error instanceof StartupFailedError, String(error));
      assert.equal(error.step, "serviceBus");
      assert.match(error.message, /serviceBus refused start-up .*no-such-queue.* could not be found/);
    });

    it("an aborted start-up releases what it opened and rejects with StartupAbortedError", async function () {
      const deadPort = await freePort();
      const port = await freePort();
      const config = loadConfig({
        env: env(
          {
            SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
            SBINBOX_POSTGRES_URL: `postgres://postgres:postgres@127.0.0.1:${deadPort}/none`,
          },
          port,
        ),
      });
      const controller = new AbortController();
      const starting = startApp(config, { logger: capturingLogger().logger, signal: controller.signal });
      const readyz = pollReadyz(port);
      await waitUntil(() => readyz.latest()?.body.database === "unreachable", "waiting for the database");
      readyz.stop();
      controller.abort();
      await assert.rejects(starting, StartupAbortedError);
      assert.equal(await getJson(port, "/healthz"), undefined, "the HTTP listener is closed");
    });
  });

  describe("sbinbox worker as a process", function () {
    const fixture = useLocalBroker();

    it("SIGTERM while it waits for the database: exit 0 at once", async function () {
      const deadPort = await freePort();
      const port = await freePort();
      const { child, done } = startCli(
        ["worker"],
        env(
          {
            SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
            SBINBOX_POSTGRES_URL: `postgres://postgres:postgres@127.0.0.1:${deadPort}/none`,
          },
          port,
        ),
      );
      const readyz = pollReadyz(port);
      try {
        await waitUntil(
          () => readyz.latest()?.body.database === "unreachable" || child.exitCode !== null,
          "readyz says the database is unreachable",
          30_000,
        );
      } finally {
        readyz.stop();
      }
      assert.equal(child.exitCode, null, "still running while the database is down");
      const signalledAt = Date.now();
      child.kill("SIGTERM");
      const result = await done;
      const tookMs = Date.now() - signalledAt;
      assert.equal(result.code, 0, result.stderr.slice(-2000));
      assert.match(result.stderr, /"msg":"stopped while waiting to start"/);
      // "At once": well under the grace period and the 30 s the old hang took; the figure is in the message.
      assert.ok(tookMs < 5_000, `exited ${tookMs} ms after SIGTERM`);
    });

    it("a login refused for longer than SBINBOX_STARTUP_LIMIT_MS: exit 1 naming the database and the refusal", async function () {
      const good = await createTestDatabase("startup_bad_password");
      const badPassword = good.replace("postgres:postgres@", "postgres:wrong-password@");
      const startedAt = Date.now();
      const { done } = startCli(
        ["worker"],
        env(
          {
            SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
            SBINBOX_POSTGRES_URL: badPassword,
            SBINBOX_STARTUP_LIMIT_MS: "1500",
          },
          0,
        ),
      );
      const result = await done;
      assert.equal(result.code, 1, result.stderr.slice(-2000));
      assert.match(
        result.stderr,
        /sbinbox worker: failed to start: database refused start-up for \d+ s \(SBINBOX_STARTUP_LIMIT_MS\): password authentication failed/,
      );
      assert.ok(Date.now() - startedAt >= 1_500, "it retried for the limit first");
      assert.match(result.stderr, /"msg":"database refused at start-up: retrying"/);
    });
  });
});
