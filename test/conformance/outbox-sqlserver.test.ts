import { sqlServerBackend } from "./backends.ts";
import { outboxSessionsConformance } from "./outbox-sessions-suite.ts";
import { outboxConformance } from "./outbox-suite.ts";

// Registered only when a SQL Server is given (the GitHub workflow sets it); never a skipped test.
const connectionString = process.env.SBINBOX_TEST_MSSQL;
if (connectionString) {
  outboxConformance(sqlServerBackend(connectionString));
  outboxSessionsConformance(sqlServerBackend(connectionString));
}
