/** Dispatches `sbinbox <command>` to src/cli/<command>.ts, loaded only when asked for. */
const commands: Record<
  string,
  { describe: string; load: () => Promise<{ run(argv: string[]): Promise<number> }> }
> = {
  migrate: { describe: "apply pending inbox (or --outbox) migrations", load: () => import("./migrate.ts") },
  broker: { describe: "run the local Service Bus broker", load: () => import("./broker.ts") },
  dev: {
    describe: "run the local broker and a PostgreSQL kept between runs, for local development",
    load: () => import("./dev.ts"),
  },
  worker: { describe: "run the worker", load: () => import("./worker.ts") },
  relay: { describe: "run the outbox relay (upstream side)", load: () => import("./relay.ts") },
  publish: { describe: "publish events", load: () => import("./publish.ts") },
  dlq: {
    describe: "list, replay or purge the dead-letter queue",
    load: () => import("./dlq.ts"),
  },
  console: {
    describe: "a local web page over the dead-letter queue, the inbox and the outbox",
    load: () => import("./console.ts"),
  },
  demo: { describe: "run the end-to-end demo on embedded defaults", load: () => import("./demo.ts") },
};

function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(10)}${c.describe}`);
  return ["usage: sbinbox <command> [options]", "", "commands:", ...lines, ""].join("\n");
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    process.stdout.write(usage());
    return name === undefined ? 2 : 0;
  }
  const command = commands[name];
  if (!command) {
    process.stderr.write(`sbinbox: unknown command "${name}"\n\n${usage()}`);
    return 2;
  }
  const module = await command.load();
  return module.run(rest);
}
