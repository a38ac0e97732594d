import { userInfo } from "node:os";
import { resolve } from "node:path";
import { createInterface } from "node:readline/promises";
import { parseArgs } from "node:util";
import { loadConfig } from "../config/load.ts";
import { ConfigError } from "../domain/errors.ts";
import {
  createServiceBusClient,
  lazyOperatorCredential,
  type ServiceBusClient,
} from "../servicebus/client.ts";
import {
  peekDeadLetters,
  purgeDeadLetters,
  replayDeadLetters,
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
import {
  pinnedToOperator,
  signedInOperator,
  type SignedInOperator,
} from "../servicebus/operator-identity.ts";
import { refusalMessage } from "../servicebus/refusal.ts";
import { duration, selectorOf } from "../servicebus/dead-letter-select.ts";
import { refuseSubscription } from "../domain/entity.ts";
import { createProgress } from "./progress.ts";

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
  let credential: TokenCredential = lazyOperatorCredential();
  let signedIn: SignedInOperator | undefined;
  if (sb.kind === "namespace") {
    try {
      signedIn = await signedInOperator(credential);
    } catch (error) {
      return fail((error as Error).message);
    }
    // Each later token must name the person the archive records.
    credential = pinnedToOperator(credential, signedIn);
  }
  const client: ServiceBusClient = createServiceBusClient(
    sb.kind === "namespace"
      ? { fullyQualifiedNamespace: sb.fullyQualifiedNamespace, credential }
      : { connectionString: (sb as { connectionString: string }).connectionString },
  );
  // Who the archive records: the Entra ID sign-in against a namespace, else the local user.
  const operator = signedIn?.label ?? userInfo().username;
  const queue = config.queue;
  try {
    if (action === "restore") return await restore(client, queue, args, streams.out, fail, credential);
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
    const progress = createProgress(action, total, streams.err);
    const options = {
      onProgress: (done: number) => progress.update(done),
      setAside: setAside !== undefined,
    };
    let result;
    if (action === "replay") {
      result = await replayDeadLetters(client, queue, targets, options);
      progress.finish(undefined, result.replayed.length);
      for (const r of result.replayed) streams.out.write(`replayed ${r.messageId} as ${r.copyMessageId}\n`);
      streams.out.write(`replayed ${result.replayed.length} message(s) to ${queue}\n`);
    } else {
      const archive = await purgeArchive(args, queue, operator, credential);
      streams.err.write(`archiving each message to ${archive.path} before it is deleted\n`);
      result = await purgeDeadLetters(client, queue, targets, {
        ...options,
        beforeComplete: async (message, info) => {
          await archive.append(message, info);
        },
      });
      progress.finish(undefined, result.purged.length);
      streams.out.write(`purged ${result.purged.length} message(s) from ${queue}/$DeadLetterQueue\n`);
    }
    return writeNotActed(streams.out, matching, result.notActed);
  } catch (error) {
    const refused = refusalMessage(error, action as "list" | "replay" | "purge" | "restore");
    return fail(`${action} failed: ${refused ?? (error as Error).message}`, 1);
  } finally {
    // Telemetry (the replay's PRODUCER spans) is started and flushed around every command by bin/sbinbox.js.
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

/** The selected messages not acted on, each with why; exit 1 when there are any. */
function writeNotActed(
  out: NodeJS.WritableStream,
  matching: readonly DeadLetter[],
  notActed: ReadonlyMap<string, string>,
): number {
  for (const m of matching) {
    const why = notActed.get(m.sequenceNumber);
    if (why !== undefined)
      out.write(`not done ${m.messageId} (sequence number ${m.sequenceNumber}): ${why}\n`);
  }
  return notActed.size > 0 ? 1 : 0;
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
  out: NodeJS.WritableStream,
  fail: (message: string, code?: number) => number,
  credential: TokenCredential,
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
  const sender = client.createSender(target);
  try {
    for (const record of records)
      out.write(`restored ${record.messageId} as ${await restoreArchived(sender, record)}\n`);
  } finally {
    await sender.close();
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
