// `npm run test:publishers`: the .NET and Python publishers (publishers/) against the worker. Both read the shared
// MessageId vectors (test/fixtures/message-id-vectors.json). Then, on the local broker (a queue without duplicate
// detection, so resends reach the worker's inbox) and the embedded PostgreSQL (an upstream database with the outbox,
// a downstream one with the inbox and the notes): each language publishes notes with resends, and enqueues notes in
// transactions beside a business row, some committed and some rolled back; the Node relay sends the outbox, and one
// `sbinbox worker` (handlers/) applies the notes. Exit 0 only when the database holds every committed and published
// note once, under the MessageId TypeScript derives for it, no rolled-back one, one inbox marker per note, every
// outbox row sent, and the queue empty. Builds: `dotnet pack` of the library (the .nupkg must hold it) and the check
// program, a wheel of the Python package installed into a folder of its own (Debian's python3-azure, python3-psycopg:
// scripts/publishers-deps.sh). The last line is `publishers: N passed, N failed`.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { spawnWorker, statsFromLog, type WorkerProcess } from "../src/app/demo-workers.ts";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { LocalBroker } from "../src/localbroker/broker.ts";
import { defaultConfig, queueDefaults } from "../src/localbroker/config.ts";
import { createPostgresOutboxStore } from "../src/outbox/postgres/store.ts";
import { startRelay } from "../src/outbox/relay.ts";
import { createOutboxSender } from "../src/servicebus/outbox-sender.ts";
import { deriveMessageId } from "../src/servicebus/message-id.ts";
import { runCli } from "../test/helpers/cli.ts";
import { startSqlServerUpstream, type SqlServerUpstream } from "./publishers-sqlserver.ts";
import { startTlsFront, type TlsFront } from "./publishers-tls.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const VECTORS = join(root, "test", "fixtures", "message-id-vectors.json");
const HANDLERS = join(root, "handlers", "index.ts");
const PYTHON = process.env.SBINBOX_PYTHON ?? "/usr/bin/python3";
const QUEUE = "notes";
const CONSUMER = "sbinbox-publishers";
const TIMEOUT_MS = 60_000;
const dotnetEnv = { ...process.env, DOTNET_CLI_TELEMETRY_OPTOUT: "1", DOTNET_NOLOGO: "1" };

/** Each language's notes: published first+1..first+11, committed first+21..30 and +36, rolled back +31..35, +37..38. */
const LANGUAGES = { dotnet: 1000, python: 2000 } as const;
type Language = keyof typeof LANGUAGES;
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);
const plan = (first: number) => ({
  published: range(first + 1, first + 11),
  committed: [...range(first + 21, first + 30), first + 36],
  rolledBack: [...range(first + 31, first + 35), first + 37, first + 38],
  // The same enqueues on SQL Server, 50 notes on, when a TDS server is there.
  committedSqlServer: [...range(first + 71, first + 80), first + 86],
  rolledBackSqlServer: [...range(first + 81, first + 85), first + 87, first + 88],
});
const idOf = (note: number) => deriveMessageId("NoteCreated", `note-${note}`);

let passed = 0;
let failed = 0;
function check(ok: boolean, what: string): void {
  if (ok) passed += 1;
  else failed += 1;
  process.stdout.write(`publishers: ${ok ? "ok" : "FAILED"} ${what}\n`);
}

function run(command: string, args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}) {
  const result = spawnSync(command, args, {
    encoding: "utf8",
    env: options.env ?? process.env,
    cwd: options.cwd,
  });
  if (result.error) throw new Error(`${command} ${args[0]}: ${result.error.message}`);
  return { code: result.status ?? 1, out: `${result.stdout}${result.stderr}` };
}

function runAsync(command: string, args: string[], env: NodeJS.ProcessEnv) {
  return new Promise<{ code: number; out: string }>((resolve, reject) => {
    const child = spawn(command, args, { env });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (out += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), TIMEOUT_MS);
    child.on("error", reject);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? 1, out });
    });
  });
}

/**
 * The package depends on the Azure SDK only: the build's own pin of Microsoft.Azure.Amqp (the registry's only
 * version) stays out of it, so a user gets the version Azure.Messaging.ServiceBus asks for. Read with Python's
 * zipfile, since Node has no zip reader.
 */
function checkPackageDependencies(nupkg: string): void {
  const read =
    "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print(z.read('Sbinbox.Publisher.nuspec').decode())";
  const nuspec = run(PYTHON, ["-c", read, nupkg]);
  const ids = [...nuspec.out.matchAll(/<dependency id="([^"]+)"/g)].map((m) => m[1]).sort();
  check(
    nuspec.code === 0 && ids.join(",") === "Azure.Identity,Azure.Messaging.ServiceBus",
    `the package's dependencies: ${ids.join(", ") || nuspec.out.slice(-500)}`,
  );
}

/** `dotnet pack` of the library and a build of the check program; returns the program's path. */
function buildDotnet(work: string): string {
  const dir = join(root, "publishers", "dotnet");
  const pack = run(
    "dotnet",
    [
      "pack",
      join(dir, "Sbinbox.Publisher"),
      "-c",
      "Release",
      "-o",
      join(work, "nupkg"),
      "--nologo",
      "-v",
      "quiet",
    ],
    { env: dotnetEnv },
  );
  const nupkg = existsSync(join(work, "nupkg")) ? readdirSync(join(work, "nupkg")) : [];
  check(
    pack.code === 0 && nupkg.some((f) => /^Sbinbox\.Publisher\.\d.*\.nupkg$/.test(f)),
    `dotnet pack: ${nupkg.join(", ") || pack.out.slice(-2000)}`,
  );
  const packed = nupkg.find((f) => f.endsWith(".nupkg"));
  if (packed) checkPackageDependencies(join(work, "nupkg", packed));
  const out = join(work, "dotnet-check");
  const build = run(
    "dotnet",
    ["build", join(dir, "Sbinbox.Publisher.Check"), "-c", "Release", "-o", out, "--nologo", "-v", "quiet"],
    { env: dotnetEnv },
  );
  if (build.code !== 0)
    throw new Error(`dotnet build of the publisher's check failed:\n${build.out.slice(-3000)}`);
  return join(out, "sbinbox-publisher-check");
}

/** A wheel of publishers/python, installed into a folder of its own; returns that folder (for PYTHONPATH). */
function buildPython(work: string): string {
  const wheels = join(work, "wheels");
  const wheel = run(PYTHON, [
    "-m",
    "pip",
    "wheel",
    "--no-deps",
    "--no-build-isolation",
    "-q",
    "-w",
    wheels,
    join(root, "publishers", "python"),
  ]);
  const built = existsSync(wheels) ? readdirSync(wheels) : [];
  check(
    wheel.code === 0 && built.some((f) => /^sbinbox_publisher-.*\.whl$/.test(f)),
    `python wheel: ${built.join(", ") || wheel.out.slice(-2000)}`,
  );
  const site = join(work, "site");
  const install = run(PYTHON, [
    "-m",
    "pip",
    "install",
    "--no-deps",
    "--no-index",
    "-q",
    "--target",
    site,
    join(wheels, built[0] ?? "none"),
  ]);
  if (install.code !== 0) throw new Error(`installing the wheel failed:\n${install.out}`);
  return site;
}

/** Packs and builds both publishers, then their own tests: the shared vectors in each, Python's unittest. */
function buildAndCheckUnits(
  work: string,
  started: number,
): { dotnetCheck: string; pyEnv: NodeJS.ProcessEnv } {
  const dotnetCheck = buildDotnet(work);
  const site = buildPython(work);
  const pyEnv = { ...process.env, PYTHONPATH: site, PYTHONDONTWRITEBYTECODE: "1" };
  process.stdout.write(`publishers: built in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);

  const dotnetVectors = run(dotnetCheck, ["vectors", VECTORS], { env: dotnetEnv });
  check(dotnetVectors.code === 0, `.NET vectors: ${dotnetVectors.out.trim()}`);
  const pyTests = run(
    PYTHON,
    ["-m", "unittest", "discover", "-s", join(root, "publishers", "python", "tests")],
    { env: pyEnv },
  );
  check(
    pyTests.code === 0 && /Ran [1-9]\d* tests?[\s\S]*\nOK/.test(pyTests.out),
    `Python unittest (vectors, messages): ${pyTests.out.trim().split("\n").slice(-3).join(" ")}`,
  );
  return { dotnetCheck, pyEnv };
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), "sbinbox-publishers-"));
  const cleanups: (() => Promise<unknown>)[] = [
    () => Promise.resolve(rmSync(work, { recursive: true, force: true })),
  ];
  let worker: WorkerProcess | undefined;
  try {
    const started = Date.now();
    const { dotnetCheck, pyEnv } = buildAndCheckUnits(work, started);

    const server = await EmbeddedPostgresServer.create();
    cleanups.push(() => server.dispose());
    const admin = new pg.Client({ connectionString: server.url() });
    await admin.connect();
    await admin.query("CREATE DATABASE upstream");
    await admin.query("CREATE DATABASE downstream");
    await admin.end();
    const upstream = new pg.Pool({ connectionString: server.url("upstream"), max: 4 });
    cleanups.push(() => upstream.end());
    const store = createPostgresOutboxStore({ pool: upstream });
    await store.migrate();
    await upstream.query(
      `CREATE TABLE "UpstreamChanges" ("NoteId" integer PRIMARY KEY, "Language" text NOT NULL)`,
    );
    const downstreamUrl = server.url("downstream");
    const migrate = await runCli(["migrate"], {
      SBINBOX_POSTGRES_URL: downstreamUrl,
      SBINBOX_HANDLERS: HANDLERS,
    });
    if (migrate.code !== 0) throw new Error(`sbinbox migrate failed: ${migrate.stderr}`);

    const babelfish =
      process.env.SBINBOX_BABELFISH_START ?? join(root, "..", "shared", "babelfish", "start.sh");
    const sqlServer = await startSqlServerUpstream(babelfish, work);
    if (sqlServer) cleanups.push(() => sqlServer.close());
    else
      process.stdout.write(
        `publishers: SQL Server upstream not run: no TDS server test aid at ${babelfish}\n`,
      );

    const config = defaultConfig();
    config.queues = [{ ...queueDefaults, name: QUEUE, requiresDuplicateDetection: false }];
    const broker = await LocalBroker.start({ port: 0, host: "127.0.0.1", config });
    cleanups.push(() => broker.stop());
    const tls: TlsFront = await startTlsFront(broker.port, work);
    cleanups.push(() => tls.close());

    const npgsql = `Host=127.0.0.1;Port=${server.port};Username=postgres;Password=postgres;Database=upstream`;
    const [dotnetRun, pythonRun] = await Promise.all([
      runAsync(
        dotnetCheck,
        [
          "e2e",
          broker.connectionString,
          QUEUE,
          npgsql,
          String(LANGUAGES.dotnet),
          ...(sqlServer ? [sqlServer.connectionString] : []),
        ],
        dotnetEnv,
      ),
      runAsync(
        PYTHON,
        [
          join(root, "publishers", "python", "tests", "e2e.py"),
          tls.connectionString,
          QUEUE,
          server.url("upstream"),
          String(LANGUAGES.python),
          tls.caFile,
          ...(sqlServer?.parts ?? []),
        ],
        pyEnv,
      ),
    ]);
    const reports = { dotnet: summary("dotnet", dotnetRun), python: summary("python", pythonRun) };

    const sender = createOutboxSender({
      connection: { connectionString: broker.connectionString },
      queue: QUEUE,
    });
    const relay = await startRelay({ store, sender, pollIntervalMs: 200 });
    cleanups.push(async () => {
      await relay.stop();
      await sender.close();
    });
    // SQL Server polls (no NOTIFY): a relay of its own, on the same queue.
    const sqlRelay = sqlServer && (await startRelay({ store: sqlServer.store, sender, pollIntervalMs: 200 }));
    if (sqlRelay) cleanups.push(() => sqlRelay.stop());
    worker = await spawnWorker("worker", {
      SBINBOX_POSTGRES_URL: downstreamUrl,
      SBINBOX_HANDLERS: HANDLERS,
      SBINBOX_SERVICEBUS_CONNECTION_STRING: broker.connectionString,
      SBINBOX_QUEUE: QUEUE,
      SBINBOX_CONSUMER: CONSUMER,
      SBINBOX_HTTP_HOST: "127.0.0.1",
    });

    const downstream = new pg.Client({ connectionString: downstreamUrl });
    await downstream.connect();
    cleanups.push(() => downstream.end());
    const expected = (Object.keys(LANGUAGES) as Language[]).flatMap((l) => {
      const p = plan(LANGUAGES[l]);
      return [...p.published, ...p.committed, ...(sqlServer ? p.committedSqlServer : [])];
    });
    await waitUntilApplied({ downstream, upstream, sqlServer, reports, broker, expected }, worker);

    await checkResults({ downstream, upstream, sqlServer, reports, broker, expected });
    worker.child.kill("SIGTERM");
    await worker.exited;
    // 6 resends a language (5 in a batch, 1 alone): without duplicate detection on the queue they reach the inbox.
    const { duplicate } = statsFromLog(worker.stderrTail);
    check(
      duplicate >= 12,
      `the worker's inbox dropped the resends as duplicates (${duplicate}, at least 12)`,
    );
    process.stdout.write(`publishers: took ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  } finally {
    if (worker && worker.child.exitCode === null) {
      worker.child.kill("SIGTERM");
      await worker.exited;
    }
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  }
}

interface Results {
  readonly downstream: pg.Client;
  readonly upstream: pg.Pool;
  readonly sqlServer: SqlServerUpstream | undefined;
  readonly reports: Record<Language, Report | undefined>;
  readonly broker: LocalBroker;
  readonly expected: readonly number[];
}

/** Waits until the notes are in, both outboxes sent and the queue empty, or TIMEOUT_MS (then the checks fail). */
async function waitUntilApplied(
  { downstream, upstream, sqlServer, broker, expected }: Results,
  worker: WorkerProcess,
): Promise<void> {
  const deadline = Date.now() + TIMEOUT_MS;
  for (;;) {
    const { rows } = await downstream.query<{ n: string }>("SELECT count(*) AS n FROM notes");
    const unsent = await upstream.query<{ n: string }>(
      `SELECT count(*) AS n FROM "Outbox" WHERE "SentUtc" IS NULL`,
    );
    const [unsentSql] = sqlServer
      ? await sqlServer.count("SELECT COUNT(*) AS n FROM dbo.Outbox WHERE SentUtc IS NULL")
      : [0];
    const c = broker.counts(QUEUE);
    if (
      Number(rows[0]!.n) >= expected.length &&
      Number(unsent.rows[0]!.n) === 0 &&
      unsentSql === 0 &&
      c.active + c.locked === 0
    )
      break;
    if (worker.child.exitCode !== null) throw new Error(`the worker exited: ${worker.stderrTail}`);
    if (Date.now() > deadline) {
      process.stdout.write(
        `publishers: timed out: ${rows[0]!.n} notes, ${unsent.rows[0]!.n} unsent, queue ${JSON.stringify(c)}\n${worker.stderrTail}\n`,
      );
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  // Let a late duplicate (a resend still in flight) land before counting.
  await new Promise((resolve) => setTimeout(resolve, 500));
}

/** What the databases and the broker hold once the worker is done, against each language's plan. */
async function checkResults({
  downstream,
  upstream,
  sqlServer,
  reports,
  broker,
  expected,
}: Results): Promise<void> {
  const notes = new Map(
    (
      await downstream.query<{ note_id: string; message_id: string }>("SELECT note_id, message_id FROM notes")
    ).rows.map((r) => [Number(r.note_id), r.message_id]),
  );
  const markers = (
    await downstream.query<{ m: string }>(
      `SELECT "MessageId" AS m FROM "InboxMarkers" WHERE "Consumer" = $1 AND "Processed"`,
      [CONSUMER],
    )
  ).rows.map((r) => r.m);
  const changes = new Set(
    (await upstream.query<{ n: number }>(`SELECT "NoteId" AS n FROM "UpstreamChanges"`)).rows.map((r) => r.n),
  );
  const outbox = (
    await upstream.query<{ m: string; sent: boolean }>(
      `SELECT "MessageId" AS m, "SentUtc" IS NOT NULL AS sent FROM "Outbox"`,
    )
  ).rows;
  for (const language of Object.keys(LANGUAGES) as Language[]) {
    const p = plan(LANGUAGES[language]);
    const report = reports[language];
    check(
      report !== undefined &&
        same(report.published, p.published.map(idOf)) &&
        same(report.committed, p.committed.map(idOf)) &&
        same(report.rolledBack, p.rolledBack.map(idOf)),
      `${language}: its MessageIds are the ones TypeScript derives (${report?.published.length ?? 0} published, ${report?.committed.length ?? 0} committed, ${report?.rolledBack.length ?? 0} rolled back)`,
    );
    const applied = [...p.published, ...p.committed];
    check(
      applied.every((n) => notes.get(n) === idOf(n)),
      `${language}: every published and committed note applied, under its derived MessageId (${applied.filter((n) => notes.get(n) === idOf(n)).length}/${applied.length})`,
    );
    check(
      p.rolledBack.every((n) => !notes.has(n) && !changes.has(n)),
      `${language}: no rolled-back note applied or changed upstream`,
    );
    check(
      p.committed.every((n) => changes.has(n)),
      `${language}: every committed note's business change is upstream`,
    );
    check(
      outbox.filter((r) => p.committed.map(idOf).includes(r.m)).length === p.committed.length,
      `${language}: one outbox row per committed note`,
    );
    if (sqlServer) await checkSqlServer(sqlServer, language, report, notes);
  }
  if (sqlServer) {
    const [sent, all] = await sqlServer.count(
      "SELECT COUNT(SentUtc) AS n FROM dbo.Outbox UNION ALL SELECT COUNT(*) FROM dbo.Outbox",
    );
    check(all === 22 && sent === all, `every SQL Server outbox row sent (${sent}/${all}, 22 expected)`);
  }
  check(
    notes.size === expected.length,
    `the notes table holds ${notes.size} notes, ${expected.length} expected (none twice: the note id is its key)`,
  );
  check(
    markers.length === expected.length && new Set(markers).size === markers.length,
    `one inbox marker per note (${markers.length})`,
  );
  check(
    outbox.length > 0 && outbox.every((r) => r.sent),
    `every outbox row sent (${outbox.filter((r) => r.sent).length}/${outbox.length})`,
  );
  const c = broker.counts(QUEUE);
  check(
    c.active + c.locked + c.deadLettered === 0,
    `the queue is empty, nothing dead-lettered (${JSON.stringify(c)})`,
  );
}

interface Report {
  published: string[];
  committed: string[];
  rolledBack: string[];
  committedSqlServer?: string[] | null;
  rolledBackSqlServer?: string[] | null;
}

/** A language's enqueues on SQL Server: its ids, every committed note applied, no rolled-back one. */
async function checkSqlServer(
  sqlServer: SqlServerUpstream,
  language: Language,
  report: Report | undefined,
  notes: Map<number, string>,
): Promise<void> {
  const p = plan(LANGUAGES[language]);
  const changes = new Set(await sqlServer.count("SELECT NoteId AS n FROM dbo.UpstreamChanges"));
  check(
    report !== undefined &&
      same(report.committedSqlServer ?? [], p.committedSqlServer.map(idOf)) &&
      same(report.rolledBackSqlServer ?? [], p.rolledBackSqlServer.map(idOf)),
    `${language} on SQL Server: its outbox MessageIds are the ones TypeScript derives (${report?.committedSqlServer?.length ?? 0} committed, ${report?.rolledBackSqlServer?.length ?? 0} rolled back)`,
  );
  check(
    p.committedSqlServer.every((n) => notes.get(n) === idOf(n) && changes.has(n)),
    `${language} on SQL Server: every committed note applied under its derived MessageId, its business change upstream`,
  );
  check(
    p.rolledBackSqlServer.every((n) => !notes.has(n) && !changes.has(n)),
    `${language} on SQL Server: no rolled-back note applied or changed upstream`,
  );
}

function summary(language: string, result: { code: number; out: string }): Report | undefined {
  const last = result.out.trim().split("\n").at(-1) ?? "";
  check(
    result.code === 0,
    `${language} e2e program exited ${result.code}${result.code === 0 ? "" : `:\n${result.out.slice(-3000)}`}`,
  );
  try {
    return JSON.parse(last) as Report;
  } catch {
    return undefined;
  }
}

function same(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

try {
  await main();
} catch (error) {
  failed += 1;
  process.stdout.write(`publishers: FAILED ${(error as Error).stack ?? String(error)}\n`);
}
process.stdout.write(`publishers: ${passed} passed, ${failed} failed\n`);
process.exitCode = failed === 0 ? 0 : 1;
