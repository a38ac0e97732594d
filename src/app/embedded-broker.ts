import type { LocalBroker } from "sbinbox-dev";
import { EMBEDDED_DEFAULTS, loadDevPackage } from "./dev-package.ts";

export interface EmbeddedBroker {
  readonly connectionString: string;
  readonly port: number;
  stop(): Promise<void>;
}

/**
 * The local broker in this process, for embedded defaults: on 127.0.0.1:5672 when free (so other commands find it),
 * else on any free port. Never the production path: the worker otherwise talks only to the configured broker.
 */
export async function startEmbeddedBroker(path: string, port = 5672): Promise<EmbeddedBroker> {
  const { LocalBroker, defaultConfig, queueDefaults } = await loadDevPackage(EMBEDDED_DEFAULTS);
  const config = defaultConfig();
  config.queues = [{ ...queueDefaults, name: path }];
  let broker: LocalBroker;
  try {
    broker = await LocalBroker.start({ port, config });
  } catch (error) {
    if ((error as { code?: unknown }).code !== "EADDRINUSE") throw error;
    broker = await LocalBroker.start({ port: 0, config });
  }
  return { connectionString: broker.connectionString, port: broker.port, stop: () => broker.stop() };
}
