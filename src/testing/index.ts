/**
 * `sbinbox-dev/testing`: what a team tests its handlers with. The harness runs them for real (the local broker,
 * PostgreSQL, the worker in the test's process); the fakes stand in for the transaction and the context in a unit
 * test of one handler alone.
 */
export {
  startHarness,
  HARNESS_RETRY_POLICY,
  type Harness,
  type HarnessOptions,
  type RawMessage,
} from "./harness.ts";
export type { Outcome, Retry } from "./outcomes.ts";
export {
  fakeTransaction,
  fakeContext,
  fakeStatements,
  type FakeTransaction,
  type FakeTransactionOptions,
  type RecordedStatement,
} from "./fakes.ts";
