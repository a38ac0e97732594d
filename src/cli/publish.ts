import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { randomUUID } from "node:crypto";
import { ConfigError } from "../domain/errors.ts";
import { canonicalName } from "../servicebus/message-id.ts";
import type { PublishEvent, PublishFailure } from "../servicebus/publisher.ts";
import { createProgress } from "./progress.ts";

const usage = `usage: sbinbox publish (--file EVENTS.jsonl | --count N | --type T --key K --body JSON [--session-id S]) [--run-id ID] [--in-flight N]

  --file F       one event per line: {"type": "AccountCredited", "key": "42", "body": {...}}, with
                 "sessionId": "<aggregate id>" for a session-enabled queue; the whole (regular)
                 file is checked first (nothing is sent from a file with a bad or too large line), then streamed
  --type T --key K --body JSON
                 one event: its type, its business key (with the type, the MessageId) and its JSON body
  --session-id S with --type: the event's session key (e.g. the aggregate's id) for a session-enabled
                 queue, set as its sessionId and partition key
  --count N      N generated demo events (AccountCredited to 50 accounts)
  --run-id ID    the demo events' key prefix (default: random); the same id republishes the same MessageIds
  --in-flight N  batches sent and not yet acknowledged, at most (default 1: the file's order, even across a
                 resend; above 1 a resent batch can land after later ones)

Batches are filled to the queue's size limit. Service Bus from SBINBOX_SERVICEBUS_CONNECTION_STRING or
SBINBOX_SERVICEBUS_NAMESPACE, queue SBINBOX_QUEUE or topic SBINBOX_TOPIC (every subscription gets its copy).
With none of them set, the Bicep deployment's outputs SERVICEBUS_NAMESPACE and SERVICEBUS_QUEUE are used.
`;

export async function run(argv: string[]): Promise<number> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      options: {
        file: { type: "string" },
        count: { type: "string" },
        type: { type: "string" },
        key: { type: "string" },
        body: { type: "string" },
        "session-id": { type: "string" },
        "run-id": { type: "string" },
        "in-flight": { type: "string", default: "1" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }).values;
  } catch (error) {
    process.stderr.write(`sbinbox publish: ${(error as Error).message}\n\n${usage}`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(usage);
    return 0;
  }
  const one =
    args.type !== undefined ||
    args.key !== undefined ||
    args.body !== undefined ||
    args["session-id"] !== undefined;
  if ([args.file !== undefined, args.count !== undefined, one].filter(Boolean).length !== 1) {
    process.stderr.write(`sbinbox publish: give exactly one of --file, --count and --type\n\n${usage}`);
    return 2;
  }
  const inFlight = Number(args["in-flight"]);
  if (!Number.isInteger(inFlight) || inFlight < 1 || inFlight > 64) {
    process.stderr.write(`sbinbox publish: --in-flight must be a whole number from 1 to 64\n`);
    return 2;
  }
  let total: number;
  let events: () => Iterable<PublishEvent> | AsyncIterable<PublishEvent>;
  let runId: string | undefined;
  // Lines whose event may be too large for a batch; checked against the queue's limit once it is known.
  let nearLimit: number[] = [];
  let single: PublishEvent | undefined;
  try {
    if (one) {
      single = singleEvent(args.type, args.key, args.body, args["session-id"]);
      total = 1;
      const event = single;
      events = () => [event];
    } else if (args.file !== undefined) {
      const file = args.file;
      // The file is read twice (check, then send): a pipe or a terminal would give everything to the check pass
      // and nothing to the send.
      if (!(await stat(file)).isFile()) {
        throw new Error(
          `${file} is not a regular file: it is read twice, so write a pipe's events to a file first`,
        );
      }
      ({ count: total, nearLimit } = await checkEventFile(file));
      events = () => readEventFile(file);
    } else {
      total = Number(args.count);
      if (!Number.isInteger(total) || total < 1) throw new Error("--count must be a positive whole number");
      // Loaded only here: the example's module is not needed to publish a file.
      const { demoEvent } = await import("../example/demo-events.ts");
      const id = args["run-id"] ?? randomUUID().slice(0, 8);
      runId = id;
      events = function* () {
        for (let i = 0; i < total; i += 1) yield demoEvent(id, i);
      };
    }
  } catch (error) {
    process.stderr.write(`sbinbox publish: ${(error as Error).message}\n`);
    return 2;
  }
  if (total === 0) {
    process.stdout.write(`no events in ${args.file}: nothing published\n`);
    return 0;
  }
  // The SDK loads only once the arguments are known to be good; the settings are read without zod (publish.ts).
  const [{ loadPublishConfig }, { createPublisher }] = await Promise.all([
    import("../config/publish.ts"),
    import("../servicebus/publisher.ts"),
  ]);
  let config;
  try {
    config = await loadPublishConfig();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`sbinbox publish: configuration error: ${error.message}\n`);
    return 2;
  }
  const sb = config.serviceBus;
  const publisher = createPublisher({
    queue: config.queue,
    maxInFlight: inFlight,
    connection:
      sb.kind === "namespace"
        ? { fullyQualifiedNamespace: sb.fullyQualifiedNamespace }
        : { connectionString: sb.connectionString },
  });
  const progress = createProgress("publish", total);
  const started = performance.now();
  let done = 0;
  try {
    if (nearLimit.length > 0) {
      const code = await checkSizes(args.file!, nearLimit, await publisher.sizeCheck());
      if (code !== 0) return code;
    }
    if (single !== undefined) {
      const code = await checkSingleSize(single, await publisher.sizeCheck());
      if (code !== 0) return code;
    }
    await publisher.publishAll(events(), {
      onSent(count) {
        done += count;
        progress.update(done);
      },
    });
    progress.finish(undefined, done);
    if (done !== total) {
      // The file changed between the check and the send: what was sent is not what was checked.
      process.stderr.write(`sbinbox publish: sent ${done} events, but ${total} were checked\n`);
      return 1;
    }
    const seconds = (performance.now() - started) / 1000;
    process.stdout.write(
      `published ${done} events to ${config.queue} in ${seconds.toFixed(2)} s (${Math.round(done / seconds)}/s)\n`,
    );
    return 0;
  } catch (error) {
    const { acknowledgedPrefix, unconfirmed } = error as Partial<PublishFailure>;
    const notes = [];
    if (acknowledgedPrefix !== undefined && acknowledgedPrefix !== done) {
      notes.push(`the first ${acknowledgedPrefix} in order; later batches were in flight`);
    }
    // A batch the broker stored but whose acknowledgement was lost with the connection.
    if (unconfirmed)
      notes.push(`up to ${unconfirmed} more were sent unacknowledged and may be on the broker`);
    const prefix = notes.length > 0 ? ` (${notes.join("; ")})` : "";
    process.stderr.write(
      `\nsbinbox publish: failed after ${done} events acknowledged${prefix}: ${describeError(error)}\n` +
        rerunAdvice(
          argv,
          single ? "type" : args.file !== undefined ? "file" : "count",
          args["run-id"],
          runId,
        ),
    );
    return 1;
  } finally {
    await publisher.close();
  }
}

/**
 * What a rerun does. Only the same events get the same MessageIds: a file, one --type event (its type and key give
 * the MessageId), or demo events with the same run id. The
 * broker drops a resend only inside its duplicate-detection window (10 minutes unless the queue says otherwise);
 * after that only the consumer's inbox drops it, while its retention still holds the first copy.
 */
function rerunAdvice(
  argv: string[],
  source: "type" | "file" | "count",
  givenRunId?: string,
  runId?: string,
): string {
  const window =
    "The broker drops the events it already has only inside its duplicate-detection window (default 10 minutes);\n" +
    "after that the consumer's inbox drops them, while its retention still covers them.\n";
  if (source === "type") {
    return `A rerun of the same command is safe: the same type and key give the same MessageId.\n${window}`;
  }
  if (source === "file" || givenRunId !== undefined) {
    return `A rerun of the same command is safe: the events keep their MessageIds.\n${window}`;
  }
  const rerun = ["sbinbox", "publish", ...argv, "--run-id", runId!].map(shellWord).join(" ");
  return `Run id ${runId}: rerun with the same id so the events keep their MessageIds:\n  ${rerun}\n${window}`;
}

function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * An error as the operator needs it: its name, code and message, and for an AggregateError (a connection that
 * could not be opened: message "" and no code of its own) each inner error the same way.
 */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as { code?: unknown }).code;
  const name = typeof code === "string" || typeof code === "number" ? `${error.name} [${code}]` : error.name;
  let text = error.message === "" ? name : `${name}: ${error.message}`;
  if (error instanceof AggregateError && error.errors.length > 0) {
    text += ` (${error.errors.map(describeError).join("; ")})`;
  }
  return text;
}

/** The one event of --type/--key/--body, checked as a file's line is; an error names the option at fault. */
function singleEvent(type?: string, key?: string, body?: string, sessionId?: string): PublishEvent {
  for (const [name, value] of [
    ["--type", type],
    ["--key", key],
    ["--body", body],
  ] as const) {
    if (value === undefined || value === "")
      throw new Error(`${name} is required with --type, --key and --body`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(body!);
  } catch (error) {
    throw new Error(`--body is not JSON (${(error as Error).message})`);
  }
  canonicalName(type!, key!);
  if (sessionId === undefined) return { type: type!, key: key!, body: parsed };
  if (sessionId === "" || sessionId.length > 128)
    throw new Error("--session-id must be 1 to 128 characters (Service Bus's limit)");
  return { type: type!, key: key!, body: parsed, sessionId };
}

async function checkSingleSize(
  event: PublishEvent,
  fits: (event: PublishEvent, where: string) => Promise<void> | undefined,
): Promise<number> {
  try {
    await fits(event, "--body");
  } catch (error) {
    if (!(error instanceof RangeError)) throw error;
    process.stderr.write(`sbinbox publish: ${error.message}\n`);
    return 2;
  }
  return 0;
}

/** The lines that may be too large, against the queue's limit; exit code 2 naming the first that is. */
async function checkSizes(
  file: string,
  lines: readonly number[],
  fits: (event: PublishEvent, where: string) => Promise<void> | undefined,
): Promise<number> {
  const wanted = new Set(lines);
  try {
    for await (const { event, line } of readNumberedEvents(file)) {
      if (wanted.has(line)) await fits(event, `${file}:${line}`);
    }
  } catch (error) {
    if (!(error instanceof RangeError)) throw error;
    process.stderr.write(`sbinbox publish: ${error.message}\n`);
    return 2;
  }
  return 0;
}

/** The events of a JSON-lines file, read as a stream; a bad line is an error naming the file and line. */
export async function* readEventFile(path: string): AsyncGenerator<PublishEvent> {
  // Its own loop rather than a generator over readNumberedEvents': one generator step a line on the send pass.
  const lines = createInterface({ input: createReadStream(path, "utf8"), crlfDelay: Infinity });
  let number = 0;
  for await (const line of lines) {
    number += 1;
    if (line.trim() !== "") yield parseEventLine(line, `${path}:${number}`);
  }
}

async function* readNumberedEvents(
  path: string,
): AsyncGenerator<{ event: PublishEvent; line: number; chars: number }> {
  const lines = createInterface({ input: createReadStream(path, "utf8"), crlfDelay: Infinity });
  let number = 0;
  for await (const line of lines) {
    number += 1;
    if (line.trim() === "") continue;
    yield { event: parseEventLine(line, `${path}:${number}`), line: number, chars: line.length };
  }
}

/**
 * 256 KB, the smallest message size limit of any Service Bus tier (Premium's can be larger): an event whose
 * message is surely below it fits every queue; one that may not is checked against the queue's own limit.
 */
const SMALLEST_LIMIT = 256 * 1024;

/**
 * Reads the whole file once, without sending: its number of events, and the lines whose event may be too large
 * for a batch (by a bound on its message's size: body, twice the type, 8 KB of the rest). A bad line stops it.
 */
export async function checkEventFile(path: string): Promise<{ count: number; nearLimit: number[] }> {
  let count = 0;
  const nearLimit: number[] = [];
  for await (const { event, line, chars } of readNumberedEvents(path)) {
    count += 1;
    // Re-serialising makes a body at most 5.25 times its text (`1e20` is 21 digits) and UTF-8 at most 3 bytes a
    // character: a line below that bound is not serialised here at all.
    if (chars * 3 * 6 + 8192 <= SMALLEST_LIMIT) continue;
    // The body as the publisher will send it.
    const body = Buffer.byteLength(JSON.stringify(event.body) ?? "", "utf8");
    if (body + 2 * Buffer.byteLength(event.type, "utf8") + 8192 > SMALLEST_LIMIT) nearLimit.push(line);
  }
  return { count, nearLimit };
}

function parseEventLine(line: string, where: string): PublishEvent {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (error) {
    throw new Error(`${where}: not JSON (${(error as Error).message})`);
  }
  const e = value as Partial<PublishEvent> | null;
  if (!e || typeof e.type !== "string" || e.type === "" || typeof e.key !== "string" || e.key === "") {
    throw new Error(`${where}: needs "type" and "key" strings and a "body"`);
  }
  if (!("body" in e)) throw new Error(`${where}: needs a "body"`);
  if (
    e.sessionId !== undefined &&
    (typeof e.sessionId !== "string" || e.sessionId === "" || e.sessionId.length > 128)
  )
    throw new Error(`${where}: "sessionId" must be a string of 1 to 128 characters`);
  try {
    canonicalName(e.type, e.key);
  } catch (error) {
    throw new Error(`${where}: ${(error as Error).message}`);
  }
  return e.sessionId === undefined
    ? { type: e.type, key: e.key, body: e.body }
    : { type: e.type, key: e.key, body: e.body, sessionId: e.sessionId };
}
