import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { randomUUID } from "node:crypto";
import { ConfigError } from "../domain/errors.ts";
import { canonicalName } from "../servicebus/message-id.ts";
import type { PublishEvent } from "../servicebus/publisher.ts";
import { createProgress } from "./progress.ts";

const usage = `usage: sbinbox publish (--file EVENTS.jsonl | --count N) [--run-id ID] [--in-flight N]

  --file F       one event per line: {"type": "AccountCredited", "key": "42", "body": {...}}; the whole file is
                 checked first (nothing is sent from a file with a bad line), then streamed
  --count N      N generated demo events (AccountCredited to 50 accounts)
  --run-id ID    the demo events' key prefix (default: random); the same id republishes the same MessageIds
  --in-flight N  batches sent and not yet acknowledged, at most (default 1: the file's order, even across a
                 resend; above 1 a resent batch can land after later ones)

Batches are filled to the queue's size limit. Service Bus from SBINBOX_SERVICEBUS_CONNECTION_STRING or
SBINBOX_SERVICEBUS_NAMESPACE, queue SBINBOX_QUEUE.
`;

export async function run(argv: string[]): Promise<number> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      options: {
        file: { type: "string" },
        count: { type: "string" },
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
  if ((args.file === undefined) === (args.count === undefined)) {
    process.stderr.write(`sbinbox publish: give exactly one of --file and --count\n\n${usage}`);
    return 2;
  }
  const inFlight = Number(args["in-flight"]);
  if (!Number.isInteger(inFlight) || inFlight < 1 || inFlight > 64) {
    process.stderr.write(`sbinbox publish: --in-flight must be a whole number from 1 to 64\n`);
    return 2;
  }
  let total: number;
  let events: () => Iterable<PublishEvent> | AsyncIterable<PublishEvent>;
  try {
    if (args.file !== undefined) {
      const file = args.file;
      total = await checkEventFile(file);
      events = () => readEventFile(file);
    } else {
      total = Number(args.count);
      if (!Number.isInteger(total) || total < 1) throw new Error("--count must be a positive whole number");
      // Loaded only here: the example's module is not needed to publish a file.
      const { demoEvent } = await import("../example/demo-events.ts");
      const runId = args["run-id"] ?? randomUUID().slice(0, 8);
      events = function* () {
        for (let i = 0; i < total; i += 1) yield demoEvent(runId, i);
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
  // The configuration (zod) and the SDK load only once the arguments are known to be good.
  const [{ loadConfig }, { createPublisher }] = await Promise.all([
    import("../config/load.ts"),
    import("../servicebus/publisher.ts"),
  ]);
  let config;
  try {
    config = loadConfig({ purpose: "publish" });
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
        : { connectionString: (sb as { connectionString: string }).connectionString },
  });
  const progress = createProgress("publish", total);
  const started = performance.now();
  let done = 0;
  try {
    await publisher.publishAll(events(), {
      onSent(count) {
        done += count;
        progress.update(done);
      },
    });
    progress.finish();
    const seconds = (performance.now() - started) / 1000;
    process.stdout.write(
      `published ${done} events to ${config.queue} in ${seconds.toFixed(2)} s (${Math.round(done / seconds)}/s)\n`,
    );
    return 0;
  } catch (error) {
    process.stderr.write(
      `\nsbinbox publish: failed after ${done} events acknowledged: ${(error as Error).message}\n` +
        `A rerun is safe: the broker drops the events it already has by their MessageIds.\n`,
    );
    return 1;
  } finally {
    await publisher.close();
  }
}

/** The events of a JSON-lines file, read as a stream; a bad line is an error naming the file and line. */
export async function* readEventFile(path: string): AsyncGenerator<PublishEvent> {
  const lines = createInterface({ input: createReadStream(path, "utf8"), crlfDelay: Infinity });
  let number = 0;
  for await (const line of lines) {
    number += 1;
    if (line.trim() === "") continue;
    yield parseEventLine(line, `${path}:${number}`);
  }
}

/** Reads the whole file once, without sending, and returns its number of events: a bad line stops it early. */
export async function checkEventFile(path: string): Promise<number> {
  let count = 0;
  for await (const _ of readEventFile(path)) count += 1;
  return count;
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
  try {
    canonicalName(e.type, e.key);
  } catch (error) {
    throw new Error(`${where}: ${(error as Error).message}`);
  }
  return { type: e.type, key: e.key, body: e.body };
}
