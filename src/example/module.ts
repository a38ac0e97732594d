import { fileURLToPath } from "node:url";
import type { HandlerModule } from "../domain/handler-module.ts";
import { exampleHandlers } from "./index.ts";

const folder = (dialect: string) => fileURLToPath(new URL(`./migrations/${dialect}/`, import.meta.url));

/** The example domain as a handler module: what runs when SBINBOX_HANDLERS is not set. */
export const exampleModule: HandlerModule = {
  name: "example",
  handlers: () => exampleHandlers(),
  migrations: { postgres: folder("postgres"), sqlserver: folder("sqlserver") },
};

export default exampleModule;
