import assert from "node:assert/strict";
import { ServiceBusError } from "@azure/service-bus";
import { execFile } from "node:child_process";
import net from "node:net";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { CredentialUnavailableError, DefaultAzureCredential } from "@azure/identity";
import mssql from "mssql";
import pg from "pg";
import { ConnectionError } from "tedious";
import {
  retryStartupStep,
  startWhenReachable,
  StartupAbortedError,
  StartupFailedError,
  type StartupFailureKind,
  type StartupState,
  type StartupStep,
} from "../../src/app/startup.ts";
import { databaseStartupFailure, serviceBusStartupFailure } from "../../src/app/startup-classify.ts";
import { publicReport } from "../../src/http/health.ts";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import {
  closeSqlServerPool,
  createSqlServerInboxStore,
  poolConfig,
} from "../../src/inbox/sqlserver/adapter.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { startFakeTds, type FakeTdsServer } from "../helpers/fake-tds.ts";

const logs: string[] = [];
const logger = createLogger({ level: "info", write: (line) => logs.push(line) });
const fast = { backoffMinMs: 1, backoffMaxMs: 4, refusedLimitMs: 60_000, logger };

const execFileAsync = promisify(execFile);

/** A port on 127.0.0.1 that nothing listens on (it was just free). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A step that fails with the given kinds in turn, then succeeds with "done". */
function scripted(kinds: StartupFailureKind[]): StartupStep<string> & { attempts: number } {
  const step = {
    name: "database",
    attempts: 0,
    attempt: () => {
      const kind = kinds[step.attempts];
      step.attempts += 1;
      if (kind) return Promise.reject(Object.assign(new Error(`failure ${step.attempts}`), { kind }));
      return Promise.resolve("done");
    },
    classify: (error: unknown) => (error as { kind: StartupFailureKind }).kind,
  };
  return step;
}

describe("start-up wait", function () {
  beforeEach(() => (logs.length = 0));

  it("retries an unreachable step until it answers, warning once and then logging each retry at info", async function () {
    const step = scripted(["unreachable", "unreachable", "unreachable", "refused"]);
    const states: StartupState[] = [];
    const result = await retryStartupStep(step, { ...fast, onState: (_, s) => states.push(s) });
    assert.equal(result, "done");
    assert.equal(step.attempts, 5);
    assert.deepEqual(states, ["waiting", "unreachable", "unreachable", "unreachable", "refused", "ok"]);
    const levels = logs.map((l) => JSON.parse(l) as { level: string; msg: string; nextAttemptMs?: number });
    assert.deepEqual(
      levels.map((l) => `${l.level} ${l.msg}`),
      [
        "warn database unreachable at start-up: retrying",
        "info database still unreachable",
        "info database still unreachable",
        "warn database refused at start-up: retrying",
        "info database reached",
      ],
    );
    // Exponential and bounded: 1, 2, 4, 4.
    assert.deepEqual(
      levels.slice(0, 4).map((l) => l.nextAttemptMs),
      [1, 2, 4, 4],
    );
  });

  it("a refusal that lasts past the limit fails, naming the step, the limit's setting and the cause", async function () {
    const refusing: StartupStep<never> = {
      name: "database",
      attempt: () => Promise.reject(new Error('password authentication failed for user "app"')),
      classify: () => "refused",
    };
    await assert.rejects(retryStartupStep(refusing, { ...fast, refusedLimitMs: 0 }), (error: unknown) => {
      assert.ok(error instanceof StartupFailedError);
      assert.equal(error.step, "database");
      assert.match(
        error.message,
        /^database refused start-up for 0 s \(SBINBOX_STARTUP_LIMIT_MS\): password/,
      );
      return true;
    });
  });

  it("an outage between refusals restarts the refusal clock: only an unbroken run of refusals counts", async function () {
    let attempts = 0;
    const kinds: StartupFailureKind[] = ["refused", "unreachable", "refused", "unreachable"];
    const step: StartupStep<string> = {
      name: "serviceBus",
      attempt: async () => {
        attempts += 1;
        if (attempts <= kinds.length) {
          // Each refusal lasts longer than the limit only if measured from the first one.
          await new Promise((r) => setTimeout(r, 15));
          throw new Error(kinds[attempts - 1]);
        }
        return "ok";
      },
      classify: (error) => (error as Error).message as StartupFailureKind,
    };
    assert.equal(await retryStartupStep(step, { ...fast, refusedLimitMs: 25 }), "ok");
  });

  it("an abort ends the wait at once, between attempts or during one", async function () {
    const controller = new AbortController();
    const hanging: StartupStep<never> = {
      name: "database",
      attempt: () => new Promise<never>(() => undefined), // a connect that never returns
      classify: () => "unreachable",
    };
    const waiting = retryStartupStep(hanging, { ...fast, signal: controller.signal });
    setImmediate(() => controller.abort());
    await assert.rejects(waiting, StartupAbortedError);

    const sleeping = new AbortController();
    const slow = retryStartupStep(scripted(["unreachable"]), {
      ...fast,
      backoffMinMs: 60_000,
      backoffMaxMs: 60_000,
      signal: sleeping.signal,
    });
    setImmediate(() => sleeping.abort());
    await assert.rejects(slow, StartupAbortedError);
  });

  it("steps run side by side; the first to fail for good stops the others and its error is thrown", async function () {
    let otherAborted = false;
    const other: StartupStep<never> = {
      name: "serviceBus",
      attempt: (signal) =>
        new Promise<never>((_, reject) =>
          signal.addEventListener("abort", () => {
            otherAborted = true;
            reject(new Error("aborted"));
          }),
        ),
      classify: () => "unreachable",
    };
    const refusing: StartupStep<never> = {
      name: "database",
      attempt: () => Promise.reject(new Error("no")),
      classify: () => "refused",
    };
    await assert.rejects(
      startWhenReachable([other, refusing], { ...fast, refusedLimitMs: 0 }),
      (error: unknown) => error instanceof StartupFailedError && error.step === "database",
    );
    assert.ok(otherAborted);
    assert.deepEqual(await startWhenReachable([scripted([]), scripted(["unreachable"])], fast), [
      "done",
      "done",
    ]);
  });
});

describe("start-up failure classification (real driver and SDK error objects)", function () {
  // Stores on pools that never connect: only their error classifiers are used.
  const postgres = createPostgresInboxStore({ pool: new pg.Pool({ max: 1 }), preCheck: false });
  const sqlServer = createSqlServerInboxStore({
    pool: new mssql.ConnectionPool({ server: "127.0.0.1", options: { trustServerCertificate: true } }),
    preCheck: false,
  });
  after(async () => {
    await postgres.close();
    await sqlServer.close();
  });

  /** The login error a real mssql pool (built by the store, so with its pool config) raises against `server`. */
  async function loginError(server: FakeTdsServer): Promise<unknown> {
    const store = createSqlServerInboxStore({
      config: {
        server: "127.0.0.1",
        port: server.port,
        database: "inbox",
        user: "app",
        password: "secret",
        // tedious's own retries of a transient login error, made quick: 3 retries as by default.
        options: { encrypt: false, connectionRetryInterval: 20 },
      },
      preCheck: false,
    });
    try {
      await store.ping();
      assert.fail("the fake server refuses every login");
    } catch (error) {
      return error;
    } finally {
      await store.close();
    }
  }

  it("SQL Server: Azure SQL's 40613 (database not available, a failover) is an outage, after tedious's own retries", async function () {
    const server = await startFakeTds(
      40613,
      "Database 'inbox' on server 'fake' is not currently available. Please retry the connection later.",
    );
    try {
      const error = await loginError(server);
      // tedious retried the login itself, so the error it finally reports is a bare ELOGIN: no isTransient.
      assert.ok(server.logins > 1, `logins: ${server.logins}`);
      assert.equal(databaseStartupFailure(sqlServer)(error), "unreachable");
    } finally {
      await server.close();
    }
  });

  it("SQL Server: a refused login (18456) is a refusal", async function () {
    const server = await startFakeTds(18456, "Login failed for user 'app'.");
    try {
      const error = await loginError(server);
      assert.equal(server.logins, 1);
      assert.equal(databaseStartupFailure(sqlServer)(error), "refused");
    } finally {
      await server.close();
    }
  });

  it("SQL Server: stopping while the first connect is in progress ends the login and closes the pool", async function () {
    // A server that accepts the connection and never answers: the login waits for the connect timeout.
    const silent = net.createServer((socket) => socket.on("error", () => undefined));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const accepted = new Promise((resolve) => silent.once("connection", resolve));
    const pool = new mssql.ConnectionPool(
      poolConfig({
        server: "127.0.0.1",
        port: (silent.address() as net.AddressInfo).port,
        user: "app",
        password: "secret",
        options: { encrypt: false },
      }),
    );
    const store = createSqlServerInboxStore({ pool, preCheck: false });
    try {
      const ping = store.ping().then(
        () => "connected",
        (e: unknown) => e,
      );
      await accepted;
      assert.ok(pool.connecting);
      // mssql alone refuses: "Cannot close a pool while it is connecting".
      await closeSqlServerPool(pool);
      assert.equal(pool.connecting, false);
      assert.equal(pool.connected, false);
      assert.notEqual(await ping, "connected");
    } finally {
      silent.close();
    }
  });

  it("SQL Server: a server that does not answer is an outage", async function () {
    const port = await closedPort();
    const store = createSqlServerInboxStore({
      config: { server: "127.0.0.1", port, user: "app", password: "secret", options: { encrypt: false } },
      preCheck: false,
    });
    try {
      const error = await store.ping().then(
        () => assert.fail("nothing listens there"),
        (e: unknown) => e,
      );
      assert.equal(databaseStartupFailure(store)(error), "unreachable");
    } finally {
      await store.close();
    }
  });

  describe("Entra credentials (real @azure/identity)", function () {
    const saved = { ...process.env };
    afterEach(() => {
      for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
      Object.assign(process.env, saved);
    });

    /** What tedious raises when the credential throws while it connects. */
    const asTedious = (error: unknown): AggregateError =>
      new AggregateError([
        new ConnectionError("Security token could not be authenticated or authorized.", "EFEDAUTH"),
        error,
      ]);

    it("DefaultAzureCredential with no identity configured is a refusal, for Service Bus and SQL Server", async function () {
      for (const key of Object.keys(process.env))
        if (/^(AZURE_|IDENTITY_|MSI_)/.test(key)) delete process.env[key];
      const error = await new DefaultAzureCredential().getToken("https://servicebus.azure.net/.default").then(
        () => assert.fail("no identity is configured here"),
        (e: unknown) => e,
      );
      // Not an AggregateError: its CredentialUnavailableErrors are only in its `errors`.
      assert.equal((error as Error).name, "AggregateAuthenticationError");
      assert.equal(serviceBusStartupFailure(error), "refused");
      assert.equal(databaseStartupFailure(sqlServer)(asTedious(error)), "refused");
    });

    it("an identity endpoint that does not answer is an outage", async function () {
      const port = await closedPort();
      // In a child process: msal-node picks the managed identity source once per process, from the environment.
      const script = `
        import { ManagedIdentityCredential } from "@azure/identity";
        import { ConnectionError } from "tedious";
        import { databaseStartupFailure, serviceBusStartupFailure } from ${JSON.stringify(new URL("../../src/app/startup-classify.ts", import.meta.url).href)};
        const error = await new ManagedIdentityCredential()
          .getToken("https://servicebus.azure.net/.default")
          .then(() => new Error("got a token"), (e) => e);
        const tedious = new AggregateError([new ConnectionError("token", "EFEDAUTH"), error]);
        const store = { classify: () => "unavailable" };
        console.log(JSON.stringify([error.name, serviceBusStartupFailure(error), databaseStartupFailure(store)(tedious)]));
      `;
      const { stdout } = await execFileAsync(process.execPath, ["--input-type=module", "-e", script], {
        cwd: fileURLToPath(new URL("../..", import.meta.url)),
        env: {
          ...process.env,
          IDENTITY_ENDPOINT: `http://127.0.0.1:${port}/msi/token`,
          IDENTITY_HEADER: "x",
        },
      });
      assert.deepEqual(JSON.parse(stdout), ["CredentialUnavailableError", "unreachable", "unreachable"]);
    });
  });

  it("PostgreSQL: a bad password or a missing database is a refusal; a refused connection an outage", async function () {
    const database = databaseStartupFailure(postgres);
    const server = (code: string): pg.DatabaseError =>
      Object.assign(new pg.DatabaseError("x", 1, "error"), { code });
    assert.equal(database(server("28P01")), "refused");
    assert.equal(database(server("3D000")), "refused");
    // The store counts only its own driver's errors as an outage, so this one comes from a real connect.
    const port = await closedPort();
    const store = createPostgresInboxStore({
      pool: new pg.Pool({ host: "127.0.0.1", port, max: 1 }),
      preCheck: false,
    });
    try {
      const error = await store.ping().then(
        () => assert.fail("nothing listens there"),
        (e: unknown) => e,
      );
      assert.equal(databaseStartupFailure(store)(error), "unreachable");
    } finally {
      await store.close();
    }
  });

  it("Service Bus: a missing or disabled entity, no access or no credential is a refusal; anything else an outage", function () {
    assert.equal(
      serviceBusStartupFailure(new ServiceBusError("not found", "MessagingEntityNotFound")),
      "refused",
    );
    assert.equal(
      serviceBusStartupFailure(new ServiceBusError("disabled", "MessagingEntityDisabled")),
      "refused",
    );
    assert.equal(
      serviceBusStartupFailure(new ServiceBusError("no Listen claim", "UnauthorizedAccess")),
      "refused",
    );
    assert.equal(serviceBusStartupFailure(new CredentialUnavailableError("no identity")), "refused");
    assert.equal(
      serviceBusStartupFailure(new ServiceBusError("gone", "ServiceCommunicationProblem")),
      "unreachable",
    );
    assert.equal(serviceBusStartupFailure(new ServiceBusError("busy", "ServiceBusy")), "unreachable");
    assert.equal(serviceBusStartupFailure(new Error("ECONNREFUSED")), "unreachable");
  });
});

describe("/readyz public report", function () {
  it("keeps ready and one-word states; drops error text, numbers and objects", function () {
    const report = publicReport({
      ready: false,
      status: "starting",
      database: "unreachable",
      error: "connect ECONNREFUSED 10.0.0.4:5432",
      stats: { committed: 3 } as unknown as string,
      held: 2 as unknown as string,
    });
    assert.deepEqual(report, { ready: false, status: "starting", database: "unreachable" });
  });
});
