import { fileURLToPath } from "node:url";
import type { HandlerModule } from "sbinbox";
import { noteCreated } from "./notes.ts";

const folder = (dialect: string) => fileURLToPath(new URL(`./migrations/${dialect}/`, import.meta.url));

/**
 * Your team's handler module: what `sbinbox worker` runs and `sbinbox migrate` migrates when SBINBOX_HANDLERS
 * names this file (the Bicep sets it to the compiled dist-handlers/index.js). Replace the notes with your domain.
 */
const module: HandlerModule = {
  // Keys this module's migrations in the database: keep it once deployed.
  name: "notes",
  handlers: () => [noteCreated],
  migrations: { postgres: folder("postgres"), sqlserver: folder("sqlserver") },
};

export default module;
