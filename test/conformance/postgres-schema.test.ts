import { postgresSchemaBackend } from "./backends.ts";
import { inboxConformance } from "./inbox-suite.ts";

// The inbox in a schema of its own inside a database shared with other runs: the path a team takes against its
// Azure SQL development database, exercised here on PostgreSQL, where it can run on every machine.
inboxConformance(postgresSchemaBackend);
