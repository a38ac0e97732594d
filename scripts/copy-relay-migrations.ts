// After sbinbox-publisher's tsc build (run from packages/publisher): copies the outbox's SQL migrations, which
// the relay's stores read at run time from beside their compiled code, into its dist/. Only the outbox's: the
// package runs no inbox migrations.
import { cpSync } from "node:fs";

const src = new URL("../src/outbox/", import.meta.url);
const dist = new URL("../packages/publisher/dist/outbox/", import.meta.url);
for (const dialect of ["postgres", "sqlserver"]) {
  cpSync(new URL(`${dialect}/migrations/`, src), new URL(`${dialect}/migrations/`, dist), {
    recursive: true,
  });
}
