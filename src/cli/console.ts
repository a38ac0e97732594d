import { resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { openAuditFile, type AuditFile } from "./audit-file.ts";
import { createAudit } from "./console-audit.ts";
import { actingOperator } from "./operator.ts";
import { openArchive } from "../servicebus/dead-letter-archive.ts";
import { createLogger, type Logger } from "../telemetry/logger.ts";
import { loadConfig, type DatabaseConnection } from "../config/load.ts";
import { ConfigError } from "../domain/errors.ts";
import type { TokenCredential } from "@azure/identity";
import { createServiceBusClient } from "../servicebus/client.ts";
import { duration } from "../servicebus/dead-letter-select.ts";
import { containerFromUrl, openBlobArchive } from "../servicebus/dead-letter-blob-archive.ts";
import type { Archive } from "../servicebus/dead-letter-archive.ts";
import { startConsoleServer } from "../console/server.ts";
import { createConsoleService, type ConsoleService, type ConsoleSources } from "../console/service.ts";
import { OWN_RETRY } from "../servicebus/throttling.ts";

const usage = `usage: sbinbox console [--port N] [--host H [--allow-host NAME ...]] [--archive-dir DIR | --archive-url URL]

  A local web page over the whole dead-letter queue (counts per reason and type, paged and filtered lists, replay or
  purge exactly the selected messages after a confirmation), the entity's counts, and the inbox's and outbox's state
  when a database is configured. It prints a one-time sign-in link; press Enter for another (a second browser).
  Every plan, run and result is a JSON log line on stderr (and a span, with Application Insights configured).
    --port N     port to listen on (default 0: a free one, printed)
    --host H     address to listen on (default 127.0.0.1). Anything else serves the page, with your Service Bus
                 rights, beyond this machine, over plain HTTP (the sign-in link's secret crosses the network in
                 the clear), and a warning is printed
    --allow-host NAME
                 a name (or address) the page is reached by besides H, e.g. the machine's name (repeatable)
    --show-personal
                 allow the page to show bodies unmasked (the fields the handler module marks personal are masked
                 by default) and to edit those bodies
    --set-aside  let a replay or purge defer (set aside) the other dead letters it passes, rather than abandon them
                 (which adds one to their delivery count): irreversible, only sbinbox or a receive by sequence
                 number reaches them afterwards; the page then offers it per action, with the count, to confirm
    --archive-dir DIR
                 where a purge writes each message before deleting it (default ./sbinbox-archive); restore with
                 \`sbinbox dlq restore --archive FILE\`
    --archive-url URL
                 the archive in Azure instead (SBINBOX_ARCHIVE_URL; the Bicep's ARCHIVE_CONTAINER_URL output): a blob
                 container written with your Entra ID identity, one blob a message; restore with
                 \`sbinbox dlq restore --archive URL\`
    --operator NAME
                 who acts, for the audit, against a local broker (default: the OS user running the console);
                 refused with SBINBOX_SERVICEBUS_NAMESPACE, where you act as your Entra ID sign-in
    --audit-file FILE
                 also append each plan, run, per-message result and end to FILE as a JSON line, fsync'ed
                 (created 0600); a plan or run whose line cannot be written is refused
    --sign-in-expiry AGE
                 how long a sign-in link is good for unused (default 10m; 30s, 15m, 1h); the page's Sign out
                 ends its session
    --session-idle AGE
                 how long a signed-in session lasts without a request (default 60m)

Settings as for \`sbinbox dlq\` (SBINBOX_SERVICEBUS_CONNECTION_STRING or SBINBOX_SERVICEBUS_NAMESPACE, SBINBOX_QUEUE:
on a topic, the service's own queue); the database as for the worker (SBINBOX_DATABASE, ...), optional.
With SBINBOX_SERVICEBUS_NAMESPACE the console acts as you: your Entra ID sign-in (az login, or az login
--use-device-code on a jump box), named on the page and in every audit line; your roles decide what you may do, and
it serves loopback only (reach it through an SSH tunnel: docs/operations.md).
`;

const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

export async function run(argv: string[], signal?: AbortSignal): Promise<number> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      options: {
        port: { type: "string" },
        host: { type: "string" },
        "allow-host": { type: "string", multiple: true },
        "archive-dir": { type: "string" },
        "archive-url": { type: "string" },
        "show-personal": { type: "boolean" },
        "set-aside": { type: "boolean" },
        "sign-in-expiry": { type: "string" },
        "session-idle": { type: "string" },
        operator: { type: "string" },
        "audit-file": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }).values;
  } catch (error) {
    process.stderr.write(`sbinbox console: ${(error as Error).message}\n\n${usage}`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(usage);
    return 0;
  }
  const port = Number(args.port ?? "0");
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`sbinbox console: --port must be a whole number from 0 to 65535\n`);
    return 2;
  }
  let linkTtlMs: number | undefined;
  let sessionIdleMs: number | undefined;
  let file: AuditFile | undefined;
  try {
    linkTtlMs = age(args["sign-in-expiry"], "--sign-in-expiry");
    sessionIdleMs = age(args["session-idle"], "--session-idle");
    file = args["audit-file"] === undefined ? undefined : openAuditFile(resolve(args["audit-file"]));
  } catch (error) {
    process.stderr.write(`sbinbox console: ${(error as Error).message}\n`);
    return 2;
  }
  const host = args.host ?? "127.0.0.1";
  const allowHosts = args["allow-host"] ?? [];
  const bad = allowHosts.find((name) => !/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)$/.test(name));
  if (bad !== undefined) {
    process.stderr.write(
      `sbinbox console: --allow-host ${JSON.stringify(bad)} is not a host name or address\n`,
    );
    return 2;
  }
  let config;
  try {
    config = loadConfig({ purpose: "dlq" });
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`sbinbox console: configuration error: ${error.message}\n`);
    return 2;
  }
  const sb = config.serviceBus;
  const inAzure = sb.kind === "namespace";
  if (inAzure && !LOOPBACK.has(host)) {
    process.stderr.write(
      `sbinbox console: refused: --host ${host} with SBINBOX_SERVICEBUS_NAMESPACE: the console acts with your own ` +
        `Entra ID identity and serves loopback only (the sign-in link would be a shared secret over plain HTTP); ` +
        `reach it through an SSH tunnel to this machine (docs/operations.md, "Reaching prod's private namespace")\n`,
    );
    return 2;
  }
  let credential: TokenCredential;
  let operator: string;
  let archive: ConsoleSources["archive"];
  try {
    // The Entra ID sign-in against a namespace, else --operator or the OS user (src/cli/operator.ts).
    ({ name: operator, credential } = await actingOperator(args.operator, inAzure));
    archive = await archiveOf(args, config.queue, credential);
  } catch (error) {
    file?.close();
    process.stderr.write(`sbinbox console: ${(error as Error).message}\n`);
    return 2;
  }
  // One SDK try per call: each is retried while throttled (src/servicebus/busy.ts), and a run says what was.
  const client = createServiceBusClient(
    inAzure
      ? { fullyQualifiedNamespace: sb.fullyQualifiedNamespace, credential }
      : { connectionString: (sb as { connectionString: string }).connectionString },
    { retryOptions: OWN_RETRY },
  );
  const closers: (() => Promise<void>)[] = [() => client.close(), () => Promise.resolve(file?.close())];
  const sources: ConsoleSources = {
    client,
    entity: config.queue,
    audit: auditOf(createLogger({ fields: { component: "console" } }), file),
    archive,
    ...(await handlerChecks()),
    showPersonal: args["show-personal"] === true,
    setAsideAllowed: args["set-aside"] === true,
    ...(await databaseSources(config, closers)),
  };
  if (!LOOPBACK.has(host)) {
    process.stderr.write(
      `sbinbox console: WARNING: serving on ${host}, not loopback, over plain HTTP: whoever sees the traffic can take ` +
        `the sign-in link or a session and read dead-lettered messages and replay or purge them with your Service ` +
        `Bus rights\n`,
    );
  }
  const service = createConsoleService(sources);
  const server = await startConsoleServer(service, {
    host,
    port,
    allowHosts,
    operator,
    signIn: {
      ...(linkTtlMs === undefined ? {} : { linkTtlMs }),
      ...(sessionIdleMs === undefined ? {} : { sessionIdleMs }),
    },
  });
  closers.unshift(() => server.close());
  // Listening for the signals before the URL is out: whoever starts this may stop it as soon as it reads the URL.
  const stopped = new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    signal?.addEventListener("abort", stop, { once: true });
  });
  process.stdout.write(
    `sbinbox console: ${server.url} (${config.queue}; one-time sign-in link for ${operator}); Ctrl-C stops it\n`,
  );
  const lines = offerNewLinks(server);
  await stopped;
  lines?.close();
  const code = await finishRunning(service);
  for (const close of closers) await close().catch(() => undefined);
  return code;
}

/**
 * Where a purge or an edit writes each message first: a blob container in Azure (--archive-url, SBINBOX_ARCHIVE_URL),
 * written with the operator's credential, or a private directory (--archive-dir, default ./sbinbox-archive).
 */
async function archiveOf(
  args: { "archive-dir"?: string; "archive-url"?: string },
  entity: string,
  credential: TokenCredential,
): Promise<(operator: string) => Archive> {
  const url = args["archive-url"] ?? (process.env.SBINBOX_ARCHIVE_URL || undefined);
  if (url !== undefined && args["archive-dir"] !== undefined)
    throw new Error("say one archive: --archive-dir or --archive-url (SBINBOX_ARCHIVE_URL), not both");
  if (url === undefined) {
    const dir = resolve(args["archive-dir"] ?? "sbinbox-archive");
    return (who) => openArchive(dir, entity, who);
  }
  const { container, prefix } = await containerFromUrl(url, credential);
  if (prefix !== "") throw new Error(`--archive-url names a container, not a path inside one: ${url}`);
  return (who) => openBlobArchive(container, entity, who);
}

/**
 * From the handler module (SBINBOX_HANDLERS, else the built-in example): each type's schema, which an edited body must
 * pass before it is sent (the worker would dead-letter it again otherwise), and its personal fields, masked in every
 * body shown. A module that does not load leaves edits refused and nothing masked by type: said on stderr.
 */
async function handlerChecks(): Promise<Pick<ConsoleSources, "validate" | "personalFields">> {
  const { loadHandlerModule } = await import("../app/handler-module.ts");
  const { HandlerRegistry } = await import("../domain/envelope.ts");
  let registry: InstanceType<typeof HandlerRegistry>;
  try {
    registry = new HandlerRegistry(await (await loadHandlerModule(process.env.SBINBOX_HANDLERS)).handlers());
  } catch (error) {
    process.stderr.write(
      `sbinbox console: edit-and-retry off: the handler module did not load: ${(error as Error).message}\n`,
    );
    return {};
  }
  return {
    personalFields: (type) => (type === undefined ? undefined : registry.get(type)?.personal),
    validate: (type, body) => {
      const handler = type === undefined ? undefined : registry.get(type);
      if (!handler)
        return `no handler for the message type ${JSON.stringify(type ?? "")}: the worker would dead-letter it again`;
      const result = handler.schema.safeParse(body);
      return result.success
        ? undefined
        : `the edited body does not match the ${type} schema: ${result.error.issues.map((i) => `${i.path.join(".") || "(body)"}: ${i.message}`).join("; ")}`;
    },
  };
}

/** On a terminal, Enter prints a new one-time sign-in link (each link signs in one browser, once). */
function offerNewLinks(server: { newSignInLink(): string }): { close(): void } | undefined {
  if (process.stdin.isTTY !== true) return undefined;
  const rl = createInterface({ input: process.stdin });
  rl.on("line", () => process.stdout.write(`sbinbox console: new sign-in link: ${server.newSignInLink()}\n`));
  return rl;
}

/**
 * Stopped mid-run: the message in hand is finished (a copy sent is completed, an archived one deleted), nothing more
 * is started, and a summary says what was done and what is left. Exit 1 when something was left.
 */
async function finishRunning(service: ConsoleService): Promise<number> {
  if (!service.running()) return 0;
  process.stderr.write("sbinbox console: stopping: finishing the message in hand\n");
  const job = await service.stop();
  if (!job) return 0;
  const counts = Object.entries(job.counts)
    .map(([result, n]) => `${n} ${result}`)
    .join(", ");
  const left = job.results.filter((r) => r.result !== "replayed" && r.result !== "purged");
  process.stderr.write(
    `sbinbox console: ${job.action} ${job.state}: ${job.done} of ${job.total} done (${counts}); ` +
      `${left.length} still dead-lettered or not reached${left.length > 0 ? `, first: ${left[0]!.messageId}` : ""}\n`,
  );
  return left.length > 0 ? 1 : 0;
}

/** The audit: log lines and spans, and with --audit-file a fsync'ed line per event first. */
function auditOf(logger: Logger, file: AuditFile | undefined): ConsoleSources["audit"] {
  return createAudit(logger, {
    component: "console",
    ...(file ? { file } : {}),
    onFileError: (error) => logger.error("console.audit-file", { error: error.message, path: file?.path }),
  });
}

/** The inbox's and the outbox's state when a database is configured; nothing otherwise. */
async function databaseSources(
  config: { inboxSchema?: string },
  closers: (() => Promise<void>)[],
): Promise<Pick<ConsoleSources, "openClaims" | "outboxStatus">> {
  let database: DatabaseConnection;
  let windowMs: number;
  try {
    const worker = loadConfig({ purpose: "worker" });
    database = worker.database;
    windowMs = worker.relay.duplicateWindowMs - worker.relay.windowMarginMs;
  } catch (error) {
    if (error instanceof ConfigError) return {};
    throw error;
  }
  if (database.kind === "embedded") return {};
  const { openDatabase } = await import("../app/database.ts");
  const { openOutboxStore } = await import("../outbox/open.ts");
  const db = await openDatabase(database, {
    preCheck: "redeliveries",
    maxConnections: 2,
    inboxSchema: config.inboxSchema,
  });
  const outbox = await openOutboxStore(database);
  closers.push(
    () => db.close(),
    () => outbox.close(),
  );
  return { openClaims: () => db.store.countOpenClaims(), outboxStatus: () => outbox.status(windowMs) };
}

/** An age option, more than zero: a link or session good for 0 would refuse every sign-in. */
function age(text: string | undefined, option: string): number | undefined {
  if (text === undefined) return undefined;
  const ms = duration(text, option);
  if (ms === 0) throw new Error(`${option} "${text}" must be more than 0`);
  return ms;
}
