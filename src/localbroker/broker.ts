import type { EntityAddress } from "./addresses.ts";
import { defaultConfig, type BrokerConfig, type QueueSettings } from "./config.ts";
import { checkForwarding } from "./forwarding-check.ts";
import { startForwarding } from "./forwarding.ts";
import { quietLogger, type BrokerLogger } from "./logger.ts";
import { Queue, type BrokerDeadLetterListener, type QueueCounts } from "./queue.ts";
import { AmqpServer, type Entity } from "./server.ts";
import { Throttle, type ThrottleCounts, type ThrottleKind, type ThrottleSettings } from "./throttle.ts";
import { Topic, type TopicCounts } from "./topic.ts";

export interface LocalBrokerOptions {
  port?: number;
  host?: string;
  config?: BrokerConfig;
  logger?: BrokerLogger;
  /** The clock for locks, TTL, scheduling and duplicate windows. */
  now?: () => number;
  /** How often locks, schedules and expiries are checked. */
  tickMs?: number;
  /** ServerBusy by operation kind (throttle.ts); replaces the config's `throttling`. */
  throttling?: ThrottleSettings;
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
  readonly topicNames: string[];
  private readonly queues: Map<string, Queue>;
  private readonly topics: Map<string, Topic>;
  private readonly server: AmqpServer;
  private readonly timer: NodeJS.Timeout;
  private readonly throttler: Throttle;

  private constructor(
    port: number,
    queues: Map<string, Queue>,
    topics: Map<string, Topic>,
    server: AmqpServer,
    timer: NodeJS.Timeout,
    throttler: Throttle,
  ) {
    this.port = port;
    this.connectionString = localConnectionString(port);
    this.queues = queues;
    this.topics = topics;
    this.queueNames = [...queues.values()].map((q) => q.name);
    this.topicNames = [...topics.values()].map((t) => t.name);
    this.server = server;
    this.timer = timer;
    this.throttler = throttler;
  }

  static async start(options: LocalBrokerOptions = {}): Promise<LocalBroker> {
    const config = options.config ?? defaultConfig();
    const now = options.now ?? Date.now;
    const logger = options.logger ?? quietLogger;
    const queues = new Map<string, Queue>();
    for (const settings of config.queues) queues.set(settings.name.toLowerCase(), createQueue(settings, now));
    const topics = new Map<string, Topic>();
    for (const settings of config.topics ?? [])
      topics.set(settings.name.toLowerCase(), new Topic(settings, now));
    // A config built in code was not read through parseConfig: the same refusals apply.
    checkForwarding(config);
    const forwarders = startForwarding(
      [...queues.values(), ...[...topics.values()].flatMap((t) => t.subscriptions.map((s) => s.queue))],
      (name) => queues.get(name.toLowerCase()) ?? topics.get(name.toLowerCase()),
    );
    const find = (address: EntityAddress): Entity | undefined => {
      if (address.subscription !== undefined) {
        const queue = topics.get(address.queue.toLowerCase())?.subscription(address.subscription)?.queue;
        return address.deadLetter ? queue?.deadLetter : queue;
      }
      const topic = topics.get(address.queue.toLowerCase());
      if (topic) return address.deadLetter ? undefined : topic;
      const queue = queues.get(address.queue.toLowerCase());
      return address.deadLetter ? queue?.deadLetter : queue;
    };
    const throttler = new Throttle(options.throttling ?? config.throttling ?? {}, now);
    const server = new AmqpServer({
      queues: { find },
      logger,
      maxMessageSizeBytes: (q) => q.settings.maxMessageSizeBytes,
      throttle: throttler,
    });
    const port = await server.listen(options.port ?? 5672, options.host ?? "127.0.0.1");
    const tick = (): void => {
      for (const entity of [...queues.values(), ...topics.values()]) {
        try {
          entity.tick();
          if (entity instanceof Queue) entity.deadLetter?.tick();
        } catch (error) {
          logger.warn(`timer on ${entity.name} failed: ${(error as Error).stack ?? String(error)}`);
        }
      }
    };
    const tickAndRetry = (): void => {
      tick();
      for (const forwarder of forwarders) forwarder.retry();
    };
    const timer = setInterval(tickAndRetry, options.tickMs ?? 50);
    timer.unref();
    const subscriptions = [...topics.values()].flatMap((t) => t.subscriptions.map((s) => s.queue.name));
    logger.info(
      `listening on ${options.host ?? "127.0.0.1"}:${port}; queues: ${[...queues.values()].map((q) => q.name).join(", ") || "(none)"}` +
        (subscriptions.length > 0 ? `; subscriptions: ${subscriptions.join(", ")}` : ""),
    );
    return new LocalBroker(port, queues, topics, server, timer, throttler);
  }

  /**
   * Per-queue counts, or a subscription's as "<topic>/Subscriptions/<name>"; throws for an unknown entity so a typo
   * in a test fails loudly.
   */
  counts(queue: string): QueueCounts {
    const match = /^([^/]+)\/subscriptions\/([^/]+)$/i.exec(queue);
    if (match) {
      const counts = this.topics.get(match[1]!.toLowerCase())?.subscriptionCounts(match[2]!);
      if (!counts) throw new Error(`no subscription named "${queue}"`);
      return counts;
    }
    const q = this.queues.get(queue.toLowerCase());
    if (!q) throw new Error(`no queue named "${queue}" (queues: ${this.queueNames.join(", ")})`);
    return q.counts();
  }

  /**
   * Calls `listener` with the MessageId (as a string: a binary id as `b:<hex>`) of every send to this queue that
   * duplicate detection drops from now on, so a caller can tell whose copies were dropped where `counts` gives only
   * their number (the demo: its own resends against the outbox relay's). Returns a function that stops it.
   */
  onDuplicateDropped(queue: string, listener: (messageId: string) => void): () => void {
    const q = this.queues.get(queue.toLowerCase());
    if (!q) throw new Error(`no queue named "${queue}" (queues: ${this.queueNames.join(", ")})`);
    return q.onDuplicateDropped(listener);
  }

  /**
   * Calls `listener` for every message of this queue the broker dead-letters itself (MaxDeliveryCountExceeded,
   * TTLExpiredException), with its MessageId as `onDuplicateDropped` gives it. Returns a function that stops it.
   */
  onDeadLettered(queue: string, listener: BrokerDeadLetterListener): () => void {
    const q = this.queues.get(queue.toLowerCase());
    if (!q) throw new Error(`no queue named "${queue}" (queues: ${this.queueNames.join(", ")})`);
    return q.onDeadLettered(listener);
  }

  /** A topic's own counts: duplicates dropped, sends no rule matched, scheduled sends not yet due. */
  topicCounts(topic: string): TopicCounts {
    const t = this.topics.get(topic.toLowerCase());
    if (!t) throw new Error(`no topic named "${topic}" (topics: ${this.topicNames.join(", ")})`);
    return t.counts();
  }

  /**
   * Throttles from now on as `settings` say (kinds not named are no longer throttled; `{}` ends throttling), as a
   * Standard namespace past its credits: each refused operation is answered with `com.microsoft:server-busy`.
   */
  throttle(settings: ThrottleSettings): void {
    this.throttler.configure(settings);
  }

  /** Operations admitted and answered ServerBusy so far, by kind. */
  throttleCounts(): Record<ThrottleKind, ThrottleCounts> {
    return this.throttler.counts();
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
