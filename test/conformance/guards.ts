/**
 * What keeps one failing conformance test from hiding its own assertion or hanging the clean-up of the others:
 * gates that a failed test leaves closed are opened after it, a database is disposed of without its disposal's error
 * replacing the test's, and a test the server cannot run is skipped with its reason in its title.
 */

export interface Gate {
  readonly promise: Promise<void>;
  open(): void;
}

/**
 * Promises resolved from outside: the tests' way to hold a transaction open at a chosen point. `openAll()` (an
 * afterEach) resolves every gate a test left closed, so a transaction held open by a failed test ends instead of
 * holding its connection until the clean-up's time-out.
 */
export function gateKeeper(): { gate: () => Gate; openAll: () => void } {
  const closed = new Set<() => void>();
  return {
    gate() {
      let open!: () => void;
      const promise = new Promise<void>((resolve) => {
        open = () => {
          closed.delete(open);
          resolve();
        };
      });
      closed.add(open);
      return { promise, open };
    },
    openAll() {
      for (const open of [...closed]) open();
    },
  };
}

/**
 * Runs `body`, then disposes of `resource`. A failure of the body is what the test reports; a disposal that fails
 * as well is added to it (as its `cause` chain would hide it), never put in its place.
 */
export async function disposingAfter<T>(
  resource: { dispose(): Promise<void> },
  body: () => Promise<T>,
): Promise<T> {
  let result: T;
  try {
    result = await body();
  } catch (error) {
    await resource.dispose().catch((disposal: unknown) => {
      if (error instanceof Error) error.message += `\n(and the clean-up failed too: ${String(disposal)})`;
    });
    throw error;
  }
  await resource.dispose();
  return result;
}

/** Set (to 1) where every feature the suites probe for is known to be there: a skip is then a failure. */
export const REQUIRE_ALL_ENV = "SBINBOX_TEST_REQUIRE_ALL";

/**
 * Skips the running test when `reason` is given (a feature the server lacks, found by probing it), with the reason
 * in its title, so that the run's output says what was not run and why. With SBINBOX_TEST_REQUIRE_ALL=1 (the GitHub
 * workflow's SQL Server job: real SQL Server has every feature) the test fails instead.
 */
export function skipFor(context: Mocha.Context, reason: string | undefined): void {
  if (reason === undefined) return;
  if (process.env[REQUIRE_ALL_ENV] === "1")
    throw new Error(
      `this test may not be skipped (${REQUIRE_ALL_ENV}=1), yet the server lacks a feature: ${reason}`,
    );
  if (context.test) context.test.title += ` [skipped: ${reason}]`;
  context.skip();
}
