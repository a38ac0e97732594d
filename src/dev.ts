/**
 * The development package (`sbinbox-dev`): the local Service Bus broker and the embedded PostgreSQL, which the
 * demo, `sbinbox broker` and the embedded defaults load on demand (src/app/dev-package.ts). The worker deployed to
 * Azure never needs it, so it is a package of its own: rhea's server side and 60 MB of PostgreSQL binaries stay
 * out of every production install.
 */
export {
  LocalBroker,
  localConnectionString,
  LOCAL_KEY,
  LOCAL_KEY_NAME,
  type LocalBrokerOptions,
} from "./localbroker/broker.ts";
export {
  BrokerConfigError,
  DEFAULT_QUEUE_NAME,
  defaultConfig,
  loadConfigFile,
  parseConfig,
  queueDefaults,
  type BrokerConfig,
  type QueueSettings,
} from "./localbroker/config.ts";
export { serviceTopic, type ServiceTopic } from "./localbroker/service-topic.ts";
export { consoleLogger, quietLogger, type BrokerLogger } from "./localbroker/logger.ts";
export { EmbeddedPostgresServer, type EmbeddedPostgresOptions } from "./embedded/postgres.ts";
