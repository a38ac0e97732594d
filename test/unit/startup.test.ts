import assert from "node:assert/strict";
import { ServiceBusError } from "@azure/service-bus";
import { CredentialUnavailableError } from "@azure/identity";
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
import { createSqlServerInboxStore } from "../../src/inbox/sqlserver/adapter.ts";
import { createLogger } from "../../src/telemetry/logger.ts";

const logs: string[] = [];
const logger = createLogger({ level: "info", write: (line) => logs.push(line) });
const fast = { backoffMinMs: 1, backoffMaxMs: 4, refusedLimitMs: 60_000, logger };

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

  it("SQL Server: a refused login (ELOGIN, EFEDAUTH) is a refusal; a transient login error or a socket error an outage", function () {
    const sqlServerDb = databaseStartupFailure(sqlServer);
    assert.equal(sqlServerDb(new ConnectionError("Login failed for user 'app'.", "ELOGIN")), "refused");
    const failover = Object.assign(new ConnectionError("Database is not currently available.", "ELOGIN"), {
      isTransient: true,
    });
    assert.equal(sqlServerDb(failover), "unreachable");
    const fedAuth = new AggregateError([
      new ConnectionError("Security token could not be authenticated or authorized.", "EFEDAUTH"),
      new CredentialUnavailableError("ManagedIdentityCredential: no managed identity endpoint"),
    ]);
    assert.equal(sqlServerDb(fedAuth), "refused");
    assert.equal(sqlServerDb(new ConnectionError("Failed to connect to db:1433", "ESOCKET")), "unreachable");
  });

  it("PostgreSQL: a bad password or a missing database is a refusal; a refused connection or a server starting up an outage", function () {
    const database = databaseStartupFailure(postgres);
    const server = (code: string): pg.DatabaseError =>
      Object.assign(new pg.DatabaseError("x", 1, "error"), { code });
    assert.equal(database(server("28P01")), "refused");
    assert.equal(database(server("3D000")), "refused");
    assert.equal(database(server("57P03")), "unreachable");
    assert.equal(
      database(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" })),
      "unreachable",
    );
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
