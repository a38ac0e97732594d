// The package's entry. Installed, it is dist/dev.js. In this repository (a workspace, linked into node_modules,
// whose real path is not under node_modules) it is the TypeScript source, as bin/sbinbox.js runs it: nothing to
// build before `npm run demo` or `npm test`. The names are listed because `export *` cannot be conditional;
// test/packages/dev-entry.test.ts checks the list against src/dev.ts.
import { existsSync } from "node:fs";

const source = new URL("../../src/dev.ts", import.meta.url);
const inCheckout = !import.meta.url.includes("/node_modules/") && existsSync(source);
const dev = await import(inCheckout ? source.href : "./dist/dev.js");

export const {
  BrokerConfigError,
  DEFAULT_QUEUE_NAME,
  EmbeddedPostgresServer,
  LOCAL_KEY,
  LOCAL_KEY_NAME,
  LocalBroker,
  consoleLogger,
  defaultConfig,
  loadConfigFile,
  localConnectionString,
  parseConfig,
  queueDefaults,
  quietLogger,
  serviceTopic,
} = dev;
