import type { EntityAddress } from "./addresses.ts";
import { defaultConfig, type BrokerConfig, type QueueSettings } from "./config.ts";
import { quietLogger, type BrokerLogger } from "./logger.ts";
import { Queue, type QueueCounts } from "./queue.ts";
import { AmqpServer } from "./server.ts";

export interface LocalBrokerOptions {
  port?: number;
  host?: string;
  config?: BrokerConfig;
  logger?: BrokerLogger;
  /** The clock for locks, TTL, scheduling and duplicate windows. */
  now?: () => number;
  /** How often locks, schedules and expiries are checked. */
  tickMs?: number;
}

/** Fixed, public-by-design credentials: the broker checks no token; the SDK only needs some key to sign with. */
export const LOCAL_KEY_NAME = "RootManageSharedAccessKey";
export const LOCAL_KEY = "SAS_KEY_VALUE";

export function localConnectionString(port: number): string {
  return `Endpoint=sb://localhost:${port};SharedAccessKeyName=${LOCAL_KEY_NAME};SharedAccessKey=${LOCAL_KEY};UseDevelopmentEmulator=true`;
}

/**
 * A local stand-in for one Service Bus namespace, for development and tests: queues in memory, spoken to by the
 * real SDKs over AMQP on loopback. Never a production broker: nothing is persisted and nothing is secured.
 */
export class LocalBroker {
  readonly port: number;
  readonly connectionString: string;
  readonly queueNames: string[];
  private readonly queues: Map<string, Queue>;
  private readonly server: AmqpServer;
  private readonly timer: NodeJS.Timeout;

  private constructor(port: number, queues: Map<string, Queue>, server: AmqpServer, timer: NodeJS.Timeout) {
    this.port = port;
    this.connectionString = localConnectionString(port);
    this.queues = queues;
    this.queueNames = [...queues.values()].map((q) => q.name);
    this.server = server;
    this.timer = timer;
  }

  static async start(options: LocalBrokerOptions = {}): Promise<LocalBroker> {
    const config = options.config ?? defaultConfig();
    const now = options.now ?? Date.now;
    const logger = options.logger ?? quietLogger;
    const queues = new Map<string, Queue>();
    for (const settings of config.queues) queues.set(settings.name.toLowerCase(), createQueue(settings, now));
    const find = (address: EntityAddress): Queue | undefined => {
      const queue = queues.get(address.queue.toLowerCase());
      return address.deadLetter ? queue?.deadLetter : queue;
    };
    const server = new AmqpServer({
      queues: { find },
      logger,
      maxMessageSizeBytes: (q) => q.settings.maxMessageSizeBytes,
    });
    const port = await server.listen(options.port ?? 5672, options.host ?? "127.0.0.1");
    const tick = (): void => {
      for (const queue of queues.values()) {
        try {
          queue.tick();
          queue.deadLetter?.tick();
        } catch (error) {
          logger.warn(`timer on ${queue.name} failed: ${(error as Error).stack ?? String(error)}`);
        }
      }
    };
    const timer = setInterval(tick, options.tickMs ?? 50);
    timer.unref();
    logger.info(
      `listening on ${options.host ?? "127.0.0.1"}:${port}; queues: ${[...queues.values()].map((q) => q.name).join(", ")}`,
    );
    return new LocalBroker(port, queues, server, timer);
  }

  /** Per-queue counts; throws for an unknown queue so a typo in a test fails loudly. */
  counts(queue: string): QueueCounts {
    const q = this.queues.get(queue.toLowerCase());
    if (!q) throw new Error(`no queue named "${queue}" (queues: ${this.queueNames.join(", ")})`);
    return q.counts();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.server.close();
  }
}

function createQueue(settings: QueueSettings, now: () => number): Queue {
  const deadLetter = new Queue(settings, now, undefined, `${settings.name}/$DeadLetterQueue`);
  return new Queue(settings, now, deadLetter);
}
