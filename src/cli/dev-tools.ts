import type * as Dev from "sbinbox-dev";
import { DevPackageMissingError, loadDevPackage } from "../app/dev-package.ts";

/**
 * The development package for `sbinbox <command>`, or undefined after saying on stderr what to install (the
 * command then exits 2).
 */
export async function devPackageOrSay(command: string): Promise<typeof Dev | undefined> {
  try {
    return await loadDevPackage(`sbinbox ${command}`);
  } catch (error) {
    if (!(error instanceof DevPackageMissingError)) throw error;
    process.stderr.write(`sbinbox ${command}: ${error.message}\n`);
    return undefined;
  }
}

/** Resolves at the first SIGINT or SIGTERM, when a long-running local tool stops. */
export function untilSignal(): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = (): void => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      resolve();
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
  });
}
