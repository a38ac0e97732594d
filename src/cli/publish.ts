import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { randomUUID } from "node:crypto";
import { loadConfig } from "../config/load.ts";
import { ConfigError } from "../domain/errors.ts";
import { demoEvent } from "../example/demo-events.ts";
import { createPublisher, type PublishEvent } from "../servicebus/publisher.ts";
import { createProgress } from "./progress.ts";

const usage = `usage: sbinbox publish (--file EVENTS.jsonl | --count N) [--run-id ID] [--batch N]

  --file F     one event per line: {"type": "AccountCredited", "key": "42", "body": {...}}
  --count N    N generated demo events (AccountCredited to 50 accounts)
  --run-id ID  the demo events' key prefix (default: random); the same id republishes the same MessageIds
  --batch N    events per batch (default 100)

Service Bus from SBINBOX_SERVICEBUS_CONNECTION_STRING or SBINBOX_SERVICEBUS_NAMESPACE, queue SBINBOX_QUEUE.
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
        batch: { type: "string", default: "100" },
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
  const batchSize = Number(args.batch);
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    process.stderr.write(`sbinbox publish: --batch must be a positive whole number\n`);
    return 2;
  }
  let events: PublishEvent[];
  try {
    events = args.file !== undefined ? await readEvents(args.file) : generate(args.count!, args["run-id"]);
  } catch (error) {
    process.stderr.write(`sbinbox publish: ${(error as Error).message}\n`);
    return 2;
  }
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
    connection:
      sb.kind === "namespace"
        ? { fullyQualifiedNamespace: sb.fullyQualifiedNamespace }
        : { connectionString: (sb as { connectionString: string }).connectionString },
  });
  const progress = createProgress("publish", events.length);
  let done = 0;
  try {
    for (let i = 0; i < events.length; i += batchSize) {
      const batch = events.slice(i, i + batchSize);
      await publisher.publishBatch(batch);
      done += batch.length;
      progress.update(done);
    }
    progress.finish();
    process.stdout.write(`published ${events.length} events to ${config.queue}\n`);
    return 0;
  } catch (error) {
    process.stderr.write(`\nsbinbox publish: failed after ${done} events: ${(error as Error).message}\n`);
    return 1;
  } finally {
    await publisher.close();
  }
}

function generate(count: string, runId: string | undefined): PublishEvent[] {
  const n = Number(count);
  if (!Number.isInteger(n) || n < 1) throw new Error("--count must be a positive whole number");
  const id = runId ?? randomUUID().slice(0, 8);
  return Array.from({ length: n }, (_, i) => demoEvent(id, i));
}

/** Reads JSON lines; a bad line is reported by its number. */
export async function readEvents(path: string): Promise<PublishEvent[]> {
  const text = await readFile(path, "utf8");
  const events: PublishEvent[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (line.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      throw new Error(`${path}:${i + 1}: not JSON (${(error as Error).message})`);
    }
    const e = value as Partial<PublishEvent> | null;
    if (!e || typeof e.type !== "string" || e.type === "" || typeof e.key !== "string" || e.key === "") {
      throw new Error(`${path}:${i + 1}: needs "type" and "key" strings and a "body"`);
    }
    if (!("body" in e)) throw new Error(`${path}:${i + 1}: needs a "body"`);
    events.push({ type: e.type, key: e.key, body: e.body });
  });
  return events;
}
