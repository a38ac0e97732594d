import { sqlServerBackend } from "./backends.ts";
import { cleanupLockConformance } from "./cleanup-lock-suite.ts";
import { cleanupPaceConformance } from "./cleanup-pace-suite.ts";
import { inboxConformance } from "./inbox-suite.ts";
import { statementsConformance } from "./statements-suite.ts";
import { transactionHandleConformance } from "./transaction-handle-suite.ts";

// Registered only when a SQL Server is given (the GitHub workflow sets it); never a skipped test.
const connectionString = process.env.SBINBOX_TEST_MSSQL;
if (connectionString) {
  inboxConformance(sqlServerBackend(connectionString));
  transactionHandleConformance(sqlServerBackend(connectionString));
  statementsConformance(sqlServerBackend(connectionString));
  cleanupPaceConformance(sqlServerBackend(connectionString));
  cleanupLockConformance(sqlServerBackend(connectionString));
}
