import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { ConfigError } from "../../src/domain/errors.ts";

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  assert.fail("expected a ConfigError");
}

describe("config", function () {
  it("nothing configured: embedded defaults", function () {
    const config = loadConfig({ env: {} });
    assert.deepEqual(config.serviceBus, { kind: "embedded" });
    assert.deepEqual(config.database, { kind: "embedded" });
    assert.equal(config.queue, "sbinbox");
    assert.equal(config.maxConcurrentCalls, 16);
    assert.equal(config.precheck, "redeliveries");
    assert.equal(config.httpHost, "127.0.0.1");
    assert.equal(config.startupLimitMs, 600_000);
  });

  it("App Service settings: namespace with a managed identity and SQL Server with Entra ID", function () {
    const config = loadConfig({
      env: {
        SBINBOX_SERVICEBUS_NAMESPACE: "sb-prod.servicebus.windows.net",
        SBINBOX_DATABASE: "sqlserver",
        SBINBOX_SQLSERVER_SERVER: "sql-prod.database.windows.net",
        SBINBOX_SQLSERVER_DATABASE: "inbox",
        SBINBOX_MAX_CONCURRENT_CALLS: "32",
        SBINBOX_PRECHECK: "false",
        PORT: "8080",
      },
    });
    assert.deepEqual(config.serviceBus, {
      kind: "namespace",
      fullyQualifiedNamespace: "sb-prod.servicebus.windows.net",
    });
    assert.deepEqual(config.database, {
      kind: "sqlserver-entra",
      server: "sql-prod.database.windows.net",
      database: "inbox",
    });
    assert.equal(config.maxConcurrentCalls, 32);
    assert.equal(config.precheck, false);
    assert.equal(config.httpHost, "0.0.0.0");
  });

  it("SBINBOX_PRECHECK: redeliveries, or a switch's words for always and never", function () {
    const read = (value: string) => loadConfig({ env: { SBINBOX_PRECHECK: value } }).precheck;
    assert.equal(read(" Redeliveries "), "redeliveries");
    assert.equal(read("true"), true);
    assert.equal(read("ON"), true);
    assert.equal(read("0"), false);
  });

  it("readiness thresholds: the progress monitor's defaults, or the SBINBOX_PROGRESS_* settings", function () {
    assert.deepEqual(loadConfig({ env: {} }).progress, {
      quietMs: 5_000,
      probeTimeoutMs: 5_000,
      silentAfterMs: 15_000,
      recoverAfterMs: 5_000,
    });
    const env = {
      SBINBOX_PROGRESS_QUIET_MS: "2000",
      SBINBOX_PROGRESS_PROBE_TIMEOUT_MS: "3000",
      SBINBOX_PROGRESS_SILENT_AFTER_MS: "5000",
      SBINBOX_PROGRESS_RECOVER_AFTER_MS: "1000",
    };
    assert.deepEqual(loadConfig({ env }).progress, {
      quietMs: 2_000,
      probeTimeoutMs: 3_000,
      silentAfterMs: 5_000,
      recoverAfterMs: 1_000,
    });
  });

  it("empty variables count as unset", function () {
    assert.equal(loadConfig({ env: { SBINBOX_QUEUE: "  ", PORT: "" } }).queue, "sbinbox");
  });

  it("errors name the bad setting", function () {
    const cases: [NodeJS.ProcessEnv, string, RegExp][] = [
      [{ SBINBOX_MAX_CONCURRENT_CALLS: "0" }, "SBINBOX_MAX_CONCURRENT_CALLS", /at least 1/],
      [{ PORT: "http" }, "PORT", /whole number/],
      [{ SBINBOX_PRECHECK: "maybe" }, "SBINBOX_PRECHECK", /redeliveries, true or false/],
      [{ SBINBOX_DATABASE: "mysql" }, "SBINBOX_DATABASE", /postgres or sqlserver/],
      [{ SBINBOX_INBOX_SCHEMA: "inbox; DROP TABLE x" }, "SBINBOX_INBOX_SCHEMA", /plain identifier/],
      [{ SBINBOX_INBOX_SCHEMA: "9inbox" }, "SBINBOX_INBOX_SCHEMA", /plain identifier/],
      [{ SBINBOX_INBOX_SCHEMA: "x".repeat(64) }, "SBINBOX_INBOX_SCHEMA", /at most 63/],
      [
        { SBINBOX_SERVICEBUS_CONNECTION_STRING: "Server=x" },
        "SBINBOX_SERVICEBUS_CONNECTION_STRING",
        /Endpoint=sb/,
      ],
      [{ SBINBOX_POSTGRES_URL: "postgres://x/y" }, "SBINBOX_SERVICEBUS_CONNECTION_STRING", /no Service Bus/],
      [
        { SBINBOX_SERVICEBUS_NAMESPACE: "a.servicebus.windows.net", SBINBOX_SQLSERVER_SERVER: "s" },
        "SBINBOX_SQLSERVER_DATABASE",
        /required/,
      ],
      [
        { SBINBOX_RETENTION_HOURS: "24" },
        "SBINBOX_RETENTION_HOURS",
        /not longer than the broker can still redeliver/,
      ],
      [{ SBINBOX_STARTUP_LIMIT_MS: "ten minutes" }, "SBINBOX_STARTUP_LIMIT_MS", /whole number/],
      [{ SBINBOX_STARTUP_LIMIT_MS: "86400001" }, "SBINBOX_STARTUP_LIMIT_MS", /at most 86400000/],
      [
        { SBINBOX_OUTAGE_BACKOFF_MIN_MS: "500", SBINBOX_OUTAGE_BACKOFF_MAX_MS: "100" },
        "SBINBOX_OUTAGE_BACKOFF_MAX_MS",
        /below/,
      ],
      [
        { SBINBOX_PROGRESS_QUIET_MS: "10000", SBINBOX_PROGRESS_SILENT_AFTER_MS: "12000" },
        "SBINBOX_PROGRESS_SILENT_AFTER_MS",
        /at least SBINBOX_PROGRESS_QUIET_MS \+ SBINBOX_PROGRESS_PROBE_TIMEOUT_MS/,
      ],
      [{ SBINBOX_PROGRESS_PROBE_TIMEOUT_MS: "50" }, "SBINBOX_PROGRESS_PROBE_TIMEOUT_MS", /at least 100/],
      [{ SBINBOX_PROGRESS_RECOVER_AFTER_MS: "soon" }, "SBINBOX_PROGRESS_RECOVER_AFTER_MS", /whole number/],
    ];
    for (const [env, setting, problem] of cases) {
      const error = configError(() => loadConfig({ env }));
      assert.equal(error.setting, setting, JSON.stringify(env));
      assert.match(error.message, problem);
      assert.ok(error.message.startsWith(`${setting}: `));
    }
  });

  it("reads a JSON file named by SBINBOX_CONFIG_FILE; the environment wins", function () {
    const files: Record<string, string> = {
      "/etc/sbinbox.json": JSON.stringify({ SBINBOX_QUEUE: "from-file", SBINBOX_MAX_CONCURRENT_CALLS: 4 }),
    };
    const readFile = (path: string) => files[path] ?? assert.fail(`unexpected read of ${path}`);
    const config = loadConfig({
      env: { SBINBOX_CONFIG_FILE: "/etc/sbinbox.json", SBINBOX_MAX_CONCURRENT_CALLS: "9" },
      readFile,
    });
    assert.equal(config.queue, "from-file");
    assert.equal(config.maxConcurrentCalls, 9);
  });

  it("a config file with an unknown key or bad JSON names it", function () {
    const unknown = configError(() =>
      loadConfig({
        env: { SBINBOX_CONFIG_FILE: "c.json" },
        readFile: () => '{"SBINBOX_MAX_CONCURENT_CALLS": 3}',
      }),
    );
    assert.equal(unknown.setting, "SBINBOX_MAX_CONCURENT_CALLS");
    assert.match(unknown.message, /unknown setting in c\.json/);
    const bad = configError(() =>
      loadConfig({ env: { SBINBOX_CONFIG_FILE: "c.json" }, readFile: () => "{" }),
    );
    assert.equal(bad.setting, "SBINBOX_CONFIG_FILE");
  });

  it("publishing needs Service Bus but no database", function () {
    const config = loadConfig({
      env: {
        SBINBOX_SERVICEBUS_CONNECTION_STRING:
          "Endpoint=sb://localhost:5672;SharedAccessKeyName=k;SharedAccessKey=v",
      },
      purpose: "publish",
    });
    assert.equal(config.serviceBus.kind, "connection-string");
    assert.equal(
      configError(() => loadConfig({ env: {}, purpose: "publish" })).setting,
      "SBINBOX_SERVICEBUS_CONNECTION_STRING",
    );
  });

  it("retry settings: defaults, lists, none, and errors naming the setting and the element", function () {
    const defaults = loadConfig({ env: {} }).retry;
    assert.deepEqual(defaults, {
      transientDelaysMs: [1_000, 5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000],
      permanentDelaysMs: [5_000],
      migrationDelaysMs: [5_000, 30_000, 120_000, 600_000],
      jitter: 0.2,
      maxInProcessWaitMs: 30_000,
    });
    const set = loadConfig({
      env: {
        SBINBOX_RETRY_DELAYS_MS: " 200, 400 ",
        SBINBOX_RETRY_PERMANENT_DELAYS_MS: "none",
        SBINBOX_RETRY_MIGRATION_DELAYS_MS: "50,60",
        SBINBOX_RETRY_JITTER: "0",
        SBINBOX_RETRY_MAX_WAIT_MS: "0",
      },
    }).retry;
    assert.deepEqual(set, {
      transientDelaysMs: [200, 400],
      permanentDelaysMs: [],
      migrationDelaysMs: [50, 60],
      jitter: 0,
      maxInProcessWaitMs: 0,
    });
    const bad = configError(() => loadConfig({ env: { SBINBOX_RETRY_DELAYS_MS: "1000,5s" } }));
    assert.equal(bad.setting, "SBINBOX_RETRY_DELAYS_MS");
    assert.match(bad.message, /element 2 \("5s"\)/);
    assert.equal(
      configError(() => loadConfig({ env: { SBINBOX_RETRY_JITTER: "1.5" } })).setting,
      "SBINBOX_RETRY_JITTER",
    );
    assert.equal(
      configError(() => loadConfig({ env: { SBINBOX_RETRY_PERMANENT_DELAYS_MS: "1,,2" } })).setting,
      "SBINBOX_RETRY_PERMANENT_DELAYS_MS",
    );
  });
});
