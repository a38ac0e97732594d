// `sbinbox-dev/testing`. Installed, it is dist/testing/index.js. In this repository it is the TypeScript source, as
// index.js is for the package's main entry. The names are listed because `export *` cannot be conditional;
// test/packages/dev-entry.test.ts checks the list against src/testing/index.ts.
import { existsSync } from "node:fs";

const source = new URL("../../src/testing/index.ts", import.meta.url);
const inCheckout = !import.meta.url.includes("/node_modules/") && existsSync(source);
const testing = await import(inCheckout ? source.href : "./dist/testing/index.js");

export const { HARNESS_RETRY_POLICY, fakeContext, fakeStatements, fakeTransaction, startHarness } = testing;
