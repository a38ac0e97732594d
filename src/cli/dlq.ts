import { randomUUID } from "node:crypto";
import { resolve } from "node:path";
import { createInterface } from "node:readline/promises";
import { parseArgs } from "node:util";
import { loadConfig } from "../config/load.ts";
import { ConfigError } from "../domain/errors.ts";
import { createServiceBusClient, type ServiceBusClient } from "../servicebus/client.ts";
import { endOf, execute, type Job, type Planned } from "../console/job.ts";
import type { AuditEvent } from "../console/service.ts";
import { createLogger } from "../telemetry/logger.ts";
import {
  peekDeadLetters,
  setAsideWarning,
  type DeadLetter,
  type Selector,
} from "../servicebus/dead-letter.ts";
import type { TokenCredential } from "@azure/identity";
import {
  openArchive,
  readArchive,
  restoreArchived,
  type Archive,
  type ArchivedMessage,
} from "../servicebus/dead-letter-archive.ts";
import {
  containerFromUrl,
  openBlobArchive,
  readBlobArchive,
} from "../servicebus/dead-letter-blob-archive.ts";
import { refusalMessage } from "../servicebus/refusal.ts";
import { duration, selectorOf } from "../servicebus/dead-letter-select.ts";
import { refuseSubscription } from "../domain/entity.ts";
import { openAuditFile, type AuditFile } from "./audit-file.ts";
import { createAudit } from "./console-audit.ts";
import { actingOperator } from "./operator.ts";
import { createProgress } from "./progress.ts";
import { describeThrottled, throttledSoFar } from "../servicebus/busy.ts";
import { OWN_RETRY } from "../servicebus/throttling.ts";

const usage = `usage: sbinbox dlq <list | replay | purge | restore> [options]

  list                      the dead-letter queue, oldest first (nothing is locked or changed)
    --bodies                also print each body (they may hold personal data)
    --json                  one JSON object a line instead of a table
    --max N                 at most N messages
  replay                    send the selected messages back to the queue, then remove them from the dead-letter queue
    --id ID                 this MessageId, or every copy of it: a retry or replay copy whose inbox key (the
                            original MessageId) is ID (repeatable)
    --reason R              every message dead-lettered with this reason (e.g. RetriesExhausted)
    --all                   every message
    --dry-run               show what would be replayed, change nothing
    --set-aside             defer (set aside) the other dead letters passed on the way instead of abandoning them
                            (an abandon adds one to a delivery count): irreversible, only sbinbox or a receive by
                            sequence number reaches them afterwards (replay and purge)
  purge                     delete the selected messages for good
    --older-than AGE        enqueued longer ago than AGE (30s, 15m, 12h, 7d)
    --reason R              dead-lettered with this reason
    --all                   every message
    --yes                   do not ask for confirmation
    --dry-run               show what would be purged, change nothing
    --archive-dir DIR       each message is written here before it is deleted (default ./sbinbox-archive)
    --archive-url URL       or to this blob container in Azure (SBINBOX_ARCHIVE_URL; the Bicep's
                            ARCHIVE_CONTAINER_URL output), with your Entra ID identity
  restore                   send purged messages back to the queue from an archive, as replay copies
    --archive FILE|URL      the archive: a .jsonl file a purge wrote (by \`sbinbox dlq\` or the console), or an
                            https:// URL of the blob container or of a path in it (a run's, a day's: each blob under it)
    --id ID                 only this MessageId or inbox key (repeatable; default every message in the file)
    --to ENTITY             send them to ENTITY, even when the archive says they were purged from another one
                            (without it, a record of another entity than SBINBOX_QUEUE is refused)

  every action (replay, purge, restore)
    --operator NAME         who acts, for the audit, against a local broker (default: the OS user); refused with
                            SBINBOX_SERVICEBUS_NAMESPACE, where you act as your Entra ID sign-in
    --audit-file FILE       also append each plan, run, per-message result and end to FILE as a JSON line, fsync'ed
                            (created 0600); a plan or run whose line cannot be written is not started

Every action's plan, run, per-message results and end are JSON log lines on stderr ("msg":"dlq.plan" ...) and
spans (Application Insights with APPLICATIONINSIGHTS_CONNECTION_STRING), as the console's.

Service Bus from SBINBOX_SERVICEBUS_CONNECTION_STRING or SBINBOX_SERVICEBUS_NAMESPACE (your own az login),
queue SBINBOX_QUEUE (on a topic, the service's own queue, which its subscription forwards to: replays go there,
past every other subscription). A replayed copy carries the original inbox key: the worker applies it at most
once.
`;

interface Streams {
  readonly out: NodeJS.WritableStream;
  readonly err: NodeJS.WriteStream;
  /** Answers a yes/no question; a terminal by default. */
  readonly confirm?: (question: string) => Promise<boolean>;
}

export async function run(argv: string[], streams: Streams = defaultStreams()): Promise<number> {
  const [action, ...rest] = argv;
  const fail = (message: string, code = 2): number => {
    streams.err.write(`sbinbox dlq: ${message}\n`);
    return code;
  };
  if (action === undefined || action === "--help" || action === "-h") {
    streams.out.write(usage);
    return action === undefined ? 2 : 0;
  }
  if (!["list", "replay", "purge", "restore"].includes(action))
    return fail(`unknown action "${action}"\n\n${usage}`);
  let args;
  try {
    args = parseArgs({
      args: rest,
      options: {
        id: { type: "string", multiple: true },
        reason: { type: "string" },
        all: { type: "boolean" },
        "older-than": { type: "string" },
        "dry-run": { type: "boolean" },
        yes: { type: "boolean", short: "y" },
        bodies: { type: "boolean" },
        json: { type: "boolean" },
        max: { type: "string" },
        "archive-dir": { type: "string" },
        "archive-url": { type: "string" },
        archive: { type: "string" },
        "set-aside": { type: "boolean" },
        to: { type: "string" },
        operator: { type: "string" },
        "audit-file": { type: "string" },
      },
      strict: true,
    }).values;
  } catch (error) {
    return fail(`${(error as Error).message}\n\n${usage}`);
  }
  let select: Selector;
  let max: number | undefined;
  try {
    select = action === "list" || action === "restore" ? () => true : selector(action, args);
    max = args.max === undefined ? undefined : positive(args.max, "--max");
  } catch (error) {
    return fail((error as Error).message);
  }
  let config;
  try {
    config = loadConfig({ purpose: "dlq" });
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return fail(`configuration error: ${error.message}`);
  }
  const sb = config.serviceBus;
  let credential: TokenCredential;
  let operator: string;
  try {
    // The Entra ID sign-in against a namespace, else --operator or the OS user (src/cli/operator.ts).
    ({ name: operator, credential } = await actingOperator(args.operator, sb.kind === "namespace"));
  } catch (error) {
    return fail((error as Error).message);
  }
  // One SDK try per call: each is retried here while throttled (busy.ts), and the run says what was.
  const client: ServiceBusClient = createServiceBusClient(
    sb.kind === "namespace"
      ? { fullyQualifiedNamespace: sb.fullyQualifiedNamespace, credential }
      : { connectionString: (sb as { connectionString: string }).connectionString },
    { retryOptions: OWN_RETRY },
  );
  const queue = config.queue;
  let file: AuditFile | undefined;
  try {
    file = args["audit-file"] === undefined ? undefined : openAuditFile(resolve(args["audit-file"]));
  } catch (error) {
    await client.close();
    return fail((error as Error).message);
  }
  const audit = createAudit(createLogger({ fields: { component: "dlq" } }), {
    component: "dlq",
    ...(file ? { file } : {}),
    onFileError: (error) =>
      streams.err.write(`sbinbox dlq: WARNING: the audit file could not take a line: ${error.message}\n`),
  });
  try {
    if (action === "restore")
      return await restore(client, queue, args, streams, fail, { audit, operator, credential });
    if (action === "list") {
      const messages = await peekDeadLetters(client, queue, { max, bodies: args.bodies === true });
      writeList(streams.out, messages, args.json === true);
      return 0;
    }
    const all = await peekDeadLetters(client, queue);
    const matching = all.filter(select);
    const total = Math.min(matching.length, max ?? matching.length);
    const targets = matching.slice(0, total).map((m) => m.sequenceNumber);
    const setAside = args["set-aside"] === true ? setAsideWarning(all, new Set(targets)).warning : undefined;
    if (args["dry-run"]) {
      writeList(streams.out, matching, args.json === true);
      streams.out.write(
        `dry run: would ${action} ${matching.length} message(s) of ${queue}/$DeadLetterQueue\n`,
      );
      if (setAside !== undefined && targets.length > 0) streams.out.write(`dry run: ${setAside}\n`);
      return 0;
    }
    if (matching.length === 0) {
      streams.out.write(`nothing to ${action}: no dead-lettered message matches\n`);
      return 0;
    }
    if (action === "purge" && !args.yes) {
      const ask = streams.confirm;
      if (!ask) return fail("purge deletes messages for good: confirm on a terminal or pass --yes");
      const ok = await ask(
        `delete ${matching.length} message(s) from ${queue}/$DeadLetterQueue for good?` +
          `${setAside === undefined ? "" : ` ${setAside}.`} [y/N] `,
      );
      if (!ok) return fail("purge cancelled", 1);
    }
    if (setAside !== undefined) streams.err.write(`--set-aside: ${setAside}\n`);
    const planned = matching.slice(0, total).map(plannedOf);
    const job = await act(client, queue, action as "replay" | "purge", planned, {
      audit,
      operator,
      setAside: setAside !== undefined,
      archive: action === "purge" ? await purgeArchive(args, queue, operator, credential) : undefined,
      err: streams.err,
    });
    writeActed(streams.out, queue, job);
    writeThrottled(streams.out, client);
    if (job.state === "failed") return fail(`${action} failed: ${job.error}`, 1);
    return job.results.some((r) => r.result !== "replayed" && r.result !== "purged") ? 1 : 0;
  } catch (error) {
    writeThrottled(streams.out, client);
    const refused = refusalMessage(error, action as "list" | "replay" | "purge" | "restore");
    return fail(`${action} failed: ${refused ?? (error as Error).message}`, 1);
  } finally {
    // Telemetry (the replay's PRODUCER spans) is started and flushed around every command by bin/sbinbox.js.
    file?.close();
    await client.close();
  }
}

function selector(
  action: string,
  args: { id?: string[]; reason?: string; all?: boolean; "older-than"?: string },
): Selector {
  const ids = args.id && args.id.length > 0 ? args.id : undefined;
  const olderThanMs = args["older-than"] === undefined ? undefined : duration(args["older-than"]);
  if (action === "replay" && olderThanMs !== undefined)
    throw new Error("replay selects by --id, --reason or --all");
  if (action === "purge" && ids) throw new Error("purge selects by --older-than, --reason or --all");
  if (!ids && args.reason === undefined && olderThanMs === undefined && !args.all) {
    throw new Error(
      action === "replay"
        ? "say what to replay: --id ID (repeatable), --reason R or --all"
        : "say what to purge: --older-than AGE, --reason R or --all",
    );
  }
  // The console builds its selections with the same function (src/console/).
  return selectorOf({ ids, reason: args.reason, olderThanMs, all: args.all });
}

/** A dead letter as a run plans it: by sequence number, with its MessageId and reason for the results. */
function plannedOf(m: DeadLetter): Planned {
  return {
    sequenceNumber: m.sequenceNumber,
    messageId: m.messageId,
    ...(m.reason === undefined ? {} : { reason: m.reason }),
  };
}

/**
 * Replays or purges exactly the planned messages through the console's run (src/console/job.ts), so the two give
 * the same results per message ("held by another operator", "gone", "not reached", "failed") and the same audit:
 * the plan, the run, each result and the end, each a JSON line on stderr and a span, and a line in the audit file.
 */
async function act(
  client: ServiceBusClient,
  queue: string,
  action: "replay" | "purge",
  planned: Planned[],
  options: {
    audit: (event: AuditEvent) => void;
    operator: string;
    setAside: boolean;
    /** A purge's: each message is written to it before it is deleted. */
    archive: Archive | undefined;
    err: NodeJS.WriteStream;
  },
): Promise<Job> {
  const { audit, operator, archive } = options;
  if (archive) options.err.write(`archiving each message to ${archive.path} before it is deleted\n`);
  audit({ event: "plan", operator, action, entity: queue, count: planned.length, messages: planned });
  const job: Job = {
    id: randomUUID(),
    action,
    operator,
    total: planned.length,
    state: "running",
    done: 0,
    counts: {},
    results: [],
    ...(archive ? { archive: archive.path } : {}),
  };
  const base = { operator, action, entity: queue, job: job.id };
  audit({ event: "run", ...base, count: planned.length, ...(archive ? { archive: archive.path } : {}) });
  const progress = createProgress(action, planned.length, options.err);
  let acted = 0;
  // SIGINT or SIGTERM mid-run: the message in hand is finished, the rest are "not reached", the end is audited.
  const stop = new AbortController();
  const onSignal = () => {
    options.err.write(`sbinbox dlq: stopping: finishing the message in hand\n`);
    stop.abort();
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  await execute(
    {
      client,
      entity: queue,
      signal: stop.signal,
      ...(archive ? { archive } : {}),
      setAside: options.setAside,
      onResult: (r) => {
        audit({ event: "result", ...base, ...r });
        if (r.result === "replayed" || r.result === "purged") progress.update(++acted);
      },
    },
    planned,
    job,
  ).finally(() => {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  });
  progress.finish(undefined, acted);
  audit({ event: "end", ...base, ...endOf(job) });
  return job;
}

/** What the run did, a line a message, and why for each one it did not do. */
function writeActed(out: NodeJS.WritableStream, queue: string, job: Job): void {
  const done = job.results.filter((r) => r.result === "replayed" || r.result === "purged");
  if (job.action === "replay") {
    for (const r of done) out.write(`replayed ${r.messageId} as ${r.copyMessageId}\n`);
    out.write(`replayed ${done.length} message(s) to ${queue}\n`);
  } else out.write(`purged ${done.length} message(s) from ${queue}/$DeadLetterQueue\n`);
  for (const r of job.results)
    if (!done.includes(r))
      out.write(
        `not done ${r.messageId} (sequence number ${r.sequenceNumber}): ${r.result}${r.why ? ` (${r.why})` : ""}\n`,
      );
}

/** A purge's archive: the blob container --archive-url (or SBINBOX_ARCHIVE_URL) names, else a private directory. */
async function purgeArchive(
  args: { "archive-dir"?: string; "archive-url"?: string },
  queue: string,
  operator: string,
  credential: TokenCredential,
): Promise<Archive> {
  const url = args["archive-url"] ?? (process.env.SBINBOX_ARCHIVE_URL || undefined);
  if (url !== undefined && args["archive-dir"] !== undefined)
    throw new Error("say one archive: --archive-dir or --archive-url (SBINBOX_ARCHIVE_URL), not both");
  if (url === undefined)
    return openArchive(resolve(args["archive-dir"] ?? "sbinbox-archive"), queue, operator);
  const { container, prefix } = await containerFromUrl(url, credential);
  if (prefix !== "") throw new Error(`--archive-url names a container, not a path inside one: ${url}`);
  return openBlobArchive(container, queue, operator);
}

/** The records of an archive file, or of every blob under an https:// URL of the container (or a path in it). */
async function archivedRecords(archive: string, credential: TokenCredential): Promise<ArchivedMessage[]> {
  if (!/^https?:\/\//i.test(archive)) return readArchive(archive);
  const { container, prefix } = await containerFromUrl(archive, credential);
  return readBlobArchive(container, prefix);
}

/** Sends the archived messages (all, or those --id names) back to the queue as replay copies. */
async function restore(
  client: ServiceBusClient,
  queue: string,
  args: { archive?: string; id?: string[]; to?: string },
  { out, err }: { out: NodeJS.WritableStream; err: NodeJS.WritableStream },
  fail: (message: string, code?: number) => number,
  {
    audit,
    operator,
    credential,
  }: { audit: (event: AuditEvent) => void; operator: string; credential: TokenCredential },
): Promise<number> {
  if (args.archive === undefined) return fail("say which archive to restore from: --archive FILE or URL");
  const ids = args.id && args.id.length > 0 ? new Set(args.id) : undefined;
  const records = (await archivedRecords(args.archive, credential)).filter(
    (r) => !ids || ids.has(r.messageId) || ids.has(r.inboxKey),
  );
  if (records.length === 0)
    return fail(`nothing to restore: no archived message in ${args.archive} matches`, 1);
  const target = args.to ?? queue;
  const elsewhere = [...new Set(records.map((r) => r.entity).filter((e) => e !== target))];
  if (args.to === undefined && elsewhere.length > 0)
    return fail(
      `${args.archive} holds messages purged from ${elsewhere.join(", ")}, not ${queue} (SBINBOX_QUEUE): ` +
        `nothing restored; pass --to ${queue} to send them here anyway, or point SBINBOX_QUEUE at their entity`,
    );
  refuseSubscription(target, "sbinbox dlq restore");
  const base = { operator, action: "restore" as const, entity: target, job: randomUUID() };
  const messages = records.map((r) => ({ sequenceNumber: r.sequenceNumber, messageId: r.messageId }));
  audit({ event: "plan", operator, action: "restore", entity: target, count: records.length, messages });
  audit({ event: "run", ...base, count: records.length, archive: args.archive });
  const sender = client.createSender(target);
  let restored = 0;
  let error: string | undefined;
  // SIGINT or SIGTERM mid-restore: the send in hand is finished, the rest are "not reached", the end is audited.
  const stop = new AbortController();
  const onSignal = () => {
    err.write(`sbinbox dlq: stopping: finishing the message in hand\n`);
    stop.abort();
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    for (const record of records) {
      if (stop.signal.aborted) break;
      const copyMessageId = await restoreArchived(sender, record);
      restored += 1;
      const { sequenceNumber, messageId } = record;
      audit({ event: "result", ...base, sequenceNumber, messageId, result: "restored", copyMessageId });
      out.write(`restored ${record.messageId} as ${copyMessageId}\n`);
    }
  } catch (caught) {
    error = (caught as Error).message;
    throw caught;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    await sender.close();
    const counts = {
      restored,
      ...(restored < records.length ? { "not reached": records.length - restored } : {}),
    };
    const state = error !== undefined ? "failed" : stop.signal.aborted ? "stopped" : "done";
    audit({ event: "end", ...base, state, counts, ...(error === undefined ? {} : { error }) });
  }
  if (stop.signal.aborted) {
    for (const record of records.slice(restored))
      out.write(
        `not done ${record.messageId} (sequence number ${record.sequenceNumber}): not reached (the run was stopped)\n`,
      );
    out.write(`restored ${restored} of ${records.length} message(s) to ${target}: stopped\n`);
    return 1;
  }
  out.write(`restored ${records.length} message(s) to ${target}\n`);
  return 0;
}

function positive(text: string, name: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive whole number`);
  return n;
}

function writeList(out: NodeJS.WritableStream, messages: readonly DeadLetter[], json: boolean): void {
  if (json) {
    for (const m of messages) out.write(`${JSON.stringify(m)}\n`);
    return;
  }
  out.write(`${["MessageId", "inbox key", "reason", "enqueued", "deliveries", "description"].join("\t")}\n`);
  for (const m of messages) {
    out.write(
      `${[
        m.messageId,
        m.inboxKey,
        m.reason ?? "",
        m.enqueuedTime?.toISOString() ?? "",
        m.deliveryCount,
        (m.description ?? "").replace(/\s+/g, " "),
      ].join("\t")}\n`,
    );
    if (m.body !== undefined) out.write(`  body: ${m.body}\n`);
  }
  out.write(`${messages.length} message(s)\n`);
}

function defaultStreams(): Streams {
  const tty = process.stdin.isTTY === true && process.stderr.isTTY === true;
  return {
    out: process.stdout,
    err: process.stderr,
    confirm: tty
      ? async (question) => {
          const rl = createInterface({ input: process.stdin, output: process.stderr });
          try {
            return /^y(es)?$/i.test((await rl.question(question)).trim());
          } finally {
            rl.close();
          }
        }
      : undefined,
  };
}

/** What Service Bus throttled during the command (each retried 1-3 s later), if anything. */
function writeThrottled(out: NodeJS.WritableStream, client: ServiceBusClient): void {
  const throttled = describeThrottled({}, throttledSoFar(client));
  if (throttled) out.write(`throttled by Service Bus (ServerBusy) and retried: ${throttled}\n`);
}
